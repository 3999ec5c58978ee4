"""The installer a bundle runs on the server: `python3 -m verl_bundle.airgap install DIR ...`
or the bundle's install.sh. Standard library only, Python 3.8+.

options (argv -> Options, usage, exit codes) -> main (the steps, in order) with state (resume
markers), env (interpreter, prefix safety, venv, pip/uv), phases (plan, clean-up, runner),
dists (installed distributions by their files), plan (--dry-run) and output (terminal + log).
"""
