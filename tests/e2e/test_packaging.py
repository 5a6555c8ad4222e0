"""The release artifacts: the wheel and the sdist build, pass ``twine check``, and the wheel
installed into a new virtualenv with nothing else finds its backends (``twopc plugins``).

What ``pip install twopc`` gives a user is checked here, not the editable install the rest
of the suite runs on: a module missing from the wheel, a broken entry point or a README
that PyPI would refuse fails this test."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import twopc
from tests.harness.processes import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PACKAGES = ("twopc", "twopc_files", "twopc_kafka", "twopc_jdbc", "twopc_delta", "pyspark_twopc")


def _run(*args: str | Path, cwd: Path = REPO, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, REPO)
    return out


def archive_text(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name).decode()


def test_wheel_and_sdist_build_and_pass_twine_check(dist: Path) -> None:
    version = twopc.__version__
    (wheel,) = dist.glob(f"twopc-{version}-py3-none-any.whl")
    (sdist,) = dist.glob(f"twopc-{version}.tar.gz")
    checked = _run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    assert checked.count("PASSED") == 2, checked

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(f"twopc-{version}.dist-info/entry_points.txt")
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names, package
        assert f"{package}/py.typed" in names, package
    for line in (b"files = twopc_files.plugin", b"kafka = twopc_kafka.plugin", b"twopc ="):
        assert line in entry_points
    assert not [n for n in names if n.startswith("tests/")], "tests shipped in the wheel"
    # the operators' files, as package data (twopc.metrics: the metrics page of the docs)
    for asset in ("twopc-dashboard.json", "twopc-alerts.yaml"):
        shipped = archive_text(wheel, f"twopc/metrics/assets/{asset}")
        assert shipped == (REPO / "src/twopc/metrics/assets" / asset).read_text(), asset

    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    root = f"twopc-{version}"
    for path in ("pyproject.toml", "README.md", "src/twopc/__init__.py", "CHANGELOG.md"):
        assert f"{root}/{path}" in members, path


def test_the_wheel_alone_in_a_new_virtualenv_lists_its_backends(dist: Path, tmp_path: Path) -> None:
    """The base install (fsspec, pluggy, pyarrow): the files backend works; the others name
    the extra that brings their driver."""
    (wheel,) = dist.glob("twopc-*.whl")
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel)
    listed = json.loads(_run(env / "bin" / "twopc", "plugins", "--json", cwd=tmp_path))
    backends = {b["name"]: b for b in listed["backends"]}
    assert set(backends) == {"files", "kafka", "mysql", "postgres", "iceberg", "delta"}
    assert backends["files"]["usable"] is True
    assert backends["files"]["version"] == twopc.__version__
    assert 'pip install "twopc[kafka]"' in backends["kafka"]["reason"]
    assert 'pip install "twopc[postgres]"' in backends["postgres"]["reason"]
    assert 'pip install "twopc[iceberg]"' in backends["iceberg"]["reason"]
    assert 'pip install "twopc[delta]"' in backends["delta"]["reason"]
    assert listed["pyspark"] == {"installed": False, "version": None}
    assert listed["failures"] == []
    version = _run(env / "bin" / "twopc", "--version", cwd=tmp_path)
    assert version.strip() == f"twopc {twopc.__version__}"


@pytest.mark.extended
def test_the_iceberg_extra_installs_on_its_own_without_spark(dist: Path, tmp_path: Path) -> None:
    """``pip install "twopc[iceberg]"`` in a new virtualenv: the backend is usable, no
    PySpark comes with it, and a batch written through the local engine reads back."""
    (wheel,) = dist.glob("twopc-*.whl")
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[iceberg]")
    listed = json.loads(_run(env / "bin" / "twopc", "plugins", "--json", cwd=tmp_path))
    backends = {b["name"]: b for b in listed["backends"]}
    assert backends["iceberg"]["usable"] is True, backends["iceberg"]
    assert listed["pyspark"] == {"installed": False, "version": None}
    script = (
        "import pyarrow as pa\n"
        "from twopc import local\n"
        "from twopc_iceberg import IcebergSink\n"
        "sink = IcebergSink('db.t', warehouse='wh', create_table=True)\n"
        "batches = [[pa.table({'id': pa.array(range(10), pa.int64())})]]\n"
        "local.LocalStream('ck', batches).run(local.foreach_batch(sink, 's', commit_log='log'))\n"
        "print(sorted(sink.load_table().scan().to_arrow()['id'].to_pylist()))\n"
    )
    out = _run(python, "-c", script, cwd=tmp_path)
    assert out.strip().splitlines()[-1] == str(list(range(10)))


@pytest.mark.extended
def test_the_delta_extra_installs_on_its_own_without_spark(dist: Path, tmp_path: Path) -> None:
    """``pip install "twopc[delta]"`` in a new virtualenv: the backend is usable, no PySpark
    comes with it, and batches written through the local engine (tasks in forked processes)
    read back with deltalake."""
    (wheel,) = dist.glob("twopc-*.whl")
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[delta]")
    listed = json.loads(_run(env / "bin" / "twopc", "plugins", "--json", cwd=tmp_path))
    backends = {b["name"]: b for b in listed["backends"]}
    assert backends["delta"]["usable"] is True, backends["delta"]
    assert listed["pyspark"] == {"installed": False, "version": None}
    script = (
        "import pyarrow as pa\n"
        "from deltalake import DeltaTable\n"
        "from twopc import local\n"
        "from twopc_delta import DeltaSink\n"
        "sink = DeltaSink('t', create_table=True)\n"
        "batches = [[pa.table({'id': pa.array(range(b * 5, b * 5 + 5), pa.int64())})] * 2\n"
        "           for b in range(2)]\n"
        "local.LocalStream('ck', batches).run(local.foreach_batch(sink, 's', commit_log='log'))\n"
        "print(sorted(DeltaTable('t').to_pyarrow_table()['id'].to_pylist()))\n"
    )
    out = _run(python, "-c", script, cwd=tmp_path)
    assert out.strip().splitlines()[-1] == str(sorted([*range(10), *range(10)]))
