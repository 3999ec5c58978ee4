"""The installer a bundle runs on the server: `python3 -m verl_bundle.airgap install DIR ...`
or the bundle's install.sh. Standard library only, Python 3.8+.

main (the entry: options -> steps -> result) runs options (argv -> Options, usage, exit codes)
and steps (verify ... done, each an event), with state (resume markers), env (interpreter,
prefix safety, venv, pip/uv), phases (plan, clean-up, runner), dists (installed distributions
by their files), plan (--dry-run) and output (terminal + log).
"""
