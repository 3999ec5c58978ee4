"""The top-level help, as typer prints it at 80 columns or more (tests/test_cli.py checks it;
regenerate with `python -m verl_bundle.cli.helptext`)."""

TOP = """\
Usage: verl-bundle [OPTIONS] COMMAND [ARGS]...

  Build verified offline bundles of the verl CUDA stack on an online host, and
  install them on air-gapped GPU servers.

  Online:  verl-bundle build --cuda 11.8 --python 3.10  ->  one .tar with
  every wheel, the sources to build on the server, a manifest, SHA256SUMS and
  install.sh.

  Server:  tar xf BUNDLE.tar && ./BUNDLE/install.sh

Options:
  --debug     Show tracebacks for errors.
  --version   Print the version and exit.
  -h, --help  Show this message and exit.

Commands:
  lock       Resolve a stack for the server and write its lock.
  build      Resolve, fetch and write the bundle tarball.
  verify     Recheck a bundle against its manifest and sums.
  inspect    What an approver asks of a bundle, without extracting it.
  readiness  Prove an installed venv can start verl's trainer.
  rehearse   Install a bundle here with the network cut.
  doctor     Check a machine before installing, with fixes.
  explain    Match a failed install's log to causes and fixes.
  assets     Fetch models and datasets into an asset bundle.
  preflight  Check a node before ray start or torchrun.
  toolchain  What this host can compile for each profile.
  profiles   List the built-in profiles, or show one.
  fleet      Compare the doctor results gathered from every node.
  slurm      Write sbatch scripts: install on every node, start Ray.
  ansible    Write an Ansible playbook: install on every host, gather.
"""


if __name__ == "__main__":  # pragma: no cover - regenerates this file
    import contextlib
    import io
    from pathlib import Path

    from verl_bundle.cli.main import run
    from verl_bundle.cli.options import Session

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run(["--help"], Session())
    source = Path(__file__).read_text(encoding="utf-8")
    start, end = source.index('TOP = """\\\n') + 11, source.index('"""\n\n\nif')
    Path(__file__).write_text(source[:start] + out.getvalue() + source[end:], encoding="utf-8")
