"""Verify: `verl-bundle verify` of a bundle tarball vs `openssl dgst -sha256` of the same file
(the strongest: one pass of OpenSSL's sha256 over the bytes) and `sha256sum -c` of its .sha256
(the familiar one).

verify reads the tarball once and hashes it twice, on two threads: every member against
SHA256SUMS and the manifest, and the whole file against the .sha256 beside it. The tarball is
read once untimed first, so every contender finds it in the page cache; the "(cold cache)" rows
drop it from the page cache before each run. `--before DIR` adds verify with older code.
Target: verify at most 1.3x openssl's time, in wall and in CPU seconds.

    python bench/verify.py [--runs N] [--size 1G] [--json] [--hogs] [--before DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

if __package__ in (None, ""):  # run as `python bench/verify.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness, synthetic
from bench.built import built_bundle
from bench.harness import Contender, Options, Report

TARGET = 1.3


def _before(opts: Options, tarball: Path, log: Path, work: Path) -> list[Contender]:
    """verify with the older code in --before DIR first on the path (the module, not the
    script; run from the work directory, since `-m` puts the current one first)."""
    if opts.before is None:
        return []
    cmd, env = harness.older(
        [*harness.verl_bundle(), "verify", str(tarball)], harness.clean_env(), opts.before
    )
    return [
        Contender(
            f"verify, code in {opts.before.name}",
            harness.show(cmd, env),
            lambda: harness.run(cmd, log, env, cwd=work),
        )
    ]


def bench(opts: Options, progress: TextIO | None) -> Report:
    with built_bundle("verify", opts, progress) as built:
        stack, log, tarball = built.stack, built.log, built.tarball
        synthetic.warm_page_cache([tarball])
        ours = [*harness.verl_bundle(), "verify", str(tarball)]
        openssl = ["openssl", "dgst", "-sha256", str(tarball)]
        sums = ["sha256sum", "--quiet", "-c", f"{tarball.name}.sha256"]
        one = harness.show(openssl)
        twice = f"{one} >/dev/null & {one} >/dev/null; wait"
        contenders = [
            Contender("verl-bundle verify", harness.show(ours), lambda: harness.run(ours, log)),
            Contender(
                "openssl dgst -sha256", harness.show(openssl), lambda: harness.run(openssl, log)
            ),
            # The floor of verify's own work on this machine: its two hash passes, each as fast
            # as OpenSSL makes it, side by side. Where the cores are real this takes as long as
            # one openssl; where they share one physical core it takes two.
            Contender(
                "2 x openssl dgst at once",
                f"{harness.show(openssl)} & {harness.show(openssl)}",
                lambda: harness.run(["sh", "-c", twice], log),
            ),
            Contender(
                "sha256sum -c",
                f"cd {tarball.parent} && {harness.show(sums)}",
                lambda: harness.run(sums, log, cwd=tarball.parent),
            ),
        ]
        contenders += _before(opts, tarball, log, built.work)
        # The same with the tarball out of the page cache before each run (read from disk).
        contenders += [harness.cold(c, tarball) for c in (contenders[0], contenders[1])]
        contenders += [harness.cold(c, tarball) for c in contenders[4:5] if opts.before]
        # verify hashes on two threads, openssl on one: the pair again with both on one core.
        contenders += harness.paired(contenders, contenders[0].name, contenders[1].name)
        contenders = harness.with_hogs(contenders, opts)
        harness.interleave(contenders, opts.runs, progress)
        size = tarball.stat().st_size
    results = harness.measured(contenders)
    ours_m, openssl_m, both_m, sums_m = results[:4]
    comparisons = [
        harness.ratio("ratio verify/openssl", ours_m, openssl_m, TARGET),
        harness.ratio("ratio verify/sha256sum -c", ours_m, sums_m, None),
        harness.ratio("ratio verify/2 x openssl at once (its two passes)", ours_m, both_m, None),
        harness.ratio("cores' gain: 2 x openssl at once/openssl", both_m, openssl_m, None),
    ]
    old = f"verify, code in {opts.before.name}" if opts.before else None
    rows = harness.side_rows("verify", "openssl", ours_m.name, openssl_m.name, old, TARGET)
    comparisons += harness.ratios(results, rows)
    pinned = [m for m in results if m.name.endswith("]") and "[core " in m.name]
    comparisons += harness.paired_ratios("ratio verify/openssl", pinned)
    return Report(
        bench="verify",
        title="verify a tarball vs openssl dgst and sha256sum -c",
        setup=f"{stack.describe()}; tarball {size / 1e9:.2f} GB",
        runs=opts.runs,
        measured=results,
        comparisons=tuple(comparisons),
        notes=(
            "verify hashes every byte twice (members, and the whole file for its .sha256) on "
            "two threads from one read; openssl and sha256sum hash it once on one. "
            "'2 x openssl at once' is those two passes at OpenSSL's speed on this machine's "
            "cores: verify's floor without dropping a hash. Its ratio to one openssl shows what "
            "the second core adds (1.0x: a real core; 2.0x: none)",
            "(cold cache): the tarball dropped from the page cache (posix_fadvise DONTNEED) "
            "before each run, so it is read from disk",
        ),
    )


def main(argv: list[str] | None = None) -> int:
    return harness.main_for(bench, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
