"""The entry-point restart that puts XLA:CPU's buffers on transparent huge pages (jaxrl_reason.cpu_malloc)."""
import os
import subprocess
import sys
import textwrap

import pytest

from jaxrl_reason import cpu_malloc
from jaxrl_reason.cpu_malloc import OPT_OUT, TUNABLE, huge_pages_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_env_adds_the_tunable_and_keeps_other_tunables():
    assert huge_pages_env({}, glibc=(2, 36), thp="madvise")["GLIBC_TUNABLES"] == TUNABLE
    env = huge_pages_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "X": "1"}, glibc=(2, 39), thp="always")
    assert env["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}" and env["X"] == "1"


@pytest.mark.parametrize("environ,glibc,thp", [
    ({OPT_OUT: "1"}, (2, 36), "madvise"),  # the user opted out
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, (2, 36), "madvise"),  # the user chose a value: keep it
    ({}, (2, 31), "madvise"),  # glibc before 2.35 has no hugetlb tunable
    ({}, None, "madvise"),  # not glibc (musl, macOS)
    ({}, (2, 36), "never"),  # THP switched off: nothing to gain
    ({}, (2, 36), None),
])
def test_no_restart_where_it_cannot_help(environ, glibc, thp):
    assert huge_pages_env(environ, glibc=glibc, thp=thp) is None


def test_a_script_restarts_once_with_the_tunable_and_its_arguments(tmp_path):
    if huge_pages_env({}, glibc=cpu_malloc._glibc_version(), thp=cpu_malloc._thp_mode()) is None:
        pytest.skip("this machine has no glibc >= 2.35 with transparent huge pages")
    script = tmp_path / "entry.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        print("start", flush=True)
        from jaxrl_reason.cpu_malloc import reexec_with_huge_pages
        reexec_with_huge_pages()
        print(os.environ.get("GLIBC_TUNABLES"), sys.argv[1:], sys.flags.optimize)
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}
    out = subprocess.run([sys.executable, "-O", str(script), "--flag", "a b"], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["start", "start", f"{TUNABLE} ['--flag', 'a b'] 1"]  # ran twice, then stopped; -O kept


def test_importing_an_entry_point_does_not_restart_the_importer(tmp_path):
    entry = tmp_path / "entry.py"  # what every script under experiments/ starts with
    entry.write_text("from jaxrl_reason.cpu_malloc import reexec_with_huge_pages\nreexec_with_huge_pages()\n")
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import importlib.util, os, sys
        sys.path.insert(0, {REPO!r})
        print("start", flush=True)
        spec = importlib.util.spec_from_file_location("entry", {str(entry)!r})
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        print("imported", os.environ.get("GLIBC_TUNABLES"))
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}
    out = subprocess.run([sys.executable, str(driver)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["start", "imported None"]
