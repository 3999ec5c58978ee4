from __future__ import annotations

import pytest

from verl_bundle.errors import UsageError
from verl_bundle.profile.target import Target, normalize_platform, parse_python

T310 = Target((3, 10), "manylinux_2_17_x86_64")


def test_platform_tags_run_from_the_target_glibc_down_to_linux() -> None:
    tags = T310.platform_tags
    assert tags[0] == "manylinux_2_17_x86_64"
    assert tags[1] == "manylinux2014_x86_64"
    assert "manylinux_2_28_x86_64" not in tags
    assert "manylinux1_x86_64" in tags and "manylinux2010_x86_64" in tags
    assert tags[-1] == "linux_x86_64"


@pytest.mark.parametrize(
    ("filename", "installable"),
    [
        ("torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl", True),
        ("x-1-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("x-1-cp310-cp310-manylinux_2_28_x86_64.whl", False),  # needs a newer glibc
        ("x-1-cp311-cp311-manylinux_2_17_x86_64.whl", False),  # another Python
        ("x-1-cp38-abi3-manylinux1_x86_64.whl", True),  # stable ABI
        ("x-1-py3-none-any.whl", True),
        ("x-1-cp310-cp310-manylinux_2_17_aarch64.whl", False),
        ("x-1-cp310-cp310-win_amd64.whl", False),
    ],
)
def test_wheel_rank_accepts_exactly_what_pip_on_the_target_would(
    filename: str, installable: bool
) -> None:
    assert (T310.wheel_rank(filename) is not None) is installable


def test_specific_wheels_rank_above_generic_ones() -> None:
    specific = T310.wheel_rank("x-1-cp310-cp310-manylinux_2_17_x86_64.whl")
    older = T310.wheel_rank("x-1-cp310-cp310-manylinux1_x86_64.whl")
    pure = T310.wheel_rank("x-1-py3-none-any.whl")
    assert specific is not None and older is not None and pure is not None
    assert specific < older < pure


def test_highest_glibc_of_a_wheel() -> None:
    assert T310.highest_glibc("x-1-cp310-cp310-manylinux2014_x86_64.whl") == (2, 17)
    assert T310.highest_glibc("x-1-cp310-cp310-manylinux1_x86_64.whl") == (2, 5)
    assert T310.highest_glibc("x-1-py3-none-any.whl") is None


def test_uv_platform_names() -> None:
    assert T310.uv_platform == "x86_64-manylinux_2_17"
    assert Target((3, 11), "manylinux_2_28_aarch64").uv_platform == "aarch64-manylinux_2_28"


def test_bad_python_and_platform_are_usage_errors() -> None:
    with pytest.raises(UsageError, match=r"X\.Y"):
        parse_python("310")
    with pytest.raises(UsageError, match="manylinux"):
        normalize_platform("win_amd64")
    assert normalize_platform("manylinux2014_x86_64") == "manylinux_2_17_x86_64"
