"""Build tests/data/public/ from PyPI source distributions (see its README.md).

    pip download --no-deps --no-binary :all: asv==0.6.6 pytest-benchmark==5.3.1 -d DIR
    pip download --no-deps --no-binary :all: --no-build-isolation lagom==1.7.1 -d DIR  # flit<3.10
    pip download --no-deps --ignore-requires-python --no-binary asv-spyglass \
        asv-spyglass==0.3.1 -d DIR
    (cd DIR && for f in *.tar.gz; do tar xzf $f; done)
    python scripts/public_sample.py DIR tests/data/public

asv's ``test/example_results`` (astropy's benchmarks measured on the machine "cheetah" in
2012-2014, pre-0.5 result files) is converted by asv itself (``asv update``); the sample keeps
the 12 latest commits of the environment py2.7-Cython-numpy1.8, every file of the two other
environments, and two files as asv 0.4 wrote them. pytest-benchmark's ``tests/test_storage``
(pytest-benchmark 2.5.0's ``--benchmark-autosave`` files) keeps its first and last four runs;
lagom's ``.benchmarks`` (its GitHub Actions job's pytest-benchmark 3.4.1 JSON, three Pythons)
is copied whole. asv-spyglass's ``tests/data`` (asv 0.6 result files of its example project on
one machine, two commits, five environments) is copied whole but for a synthetic file, under
``results/rgx1gen11/`` with the two ``benchmarks.json`` it ships merged into one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ASV, PYTEST_BENCHMARK, LAGOM = "asv-0.6.6", "pytest_benchmark-5.3.1", "lagom-1.7.1"
SPYGLASS = "asv_spyglass-0.3.1"
MAIN_ENV, COMMITS = "py2.7-Cython-numpy1.8", 12
PRE_05 = ("05d283b9-py2.7-Cython-numpy1.8.json", "b96fcc53-py2.7-Cython-numpy1.8.json")
# Files of asv's fixture that are not results of a real run: unreadable JSON (aaaaaaaa), no
# commit (bbbbbbbb), a machine name that is not the directory's (cccccccc: asv ignores it).
CRAFTED = ("aaaaaaaa", "bbbbbbbb", "cccccccc")
CONFIG = {"version": 1, "project": "astropy", "repo": ".", "results_dir": "results"}


def asv_sample(src: Path, dst: Path) -> None:
    example = src / ASV / "test" / "example_results"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(example, work / "results")
        for path in (work / "results" / "cheetah").glob("*.json"):
            if path.name.startswith(CRAFTED):
                path.unlink()
        (work / "asv.conf.json").write_text(json.dumps(CONFIG))
        subprocess.run(["asv", "update"], cwd=work, check=True, capture_output=True)
        files = sorted((work / "results" / "cheetah").glob("*-*.json"))
        data = {p: json.loads(p.read_text()) for p in files}
        main = sorted((d["date"], p) for p, d in data.items() if d["env_name"] == MAIN_ENV)
        keep = [p for _, p in main[-COMMITS:]]
        keep += [p for p, d in data.items() if d["env_name"] != MAIN_ENV]
        out = dst / "asv-astropy"
        for p in keep:
            (out / "results" / "cheetah").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out / "results" / "cheetah" / p.name)
        for name in ("benchmarks.json", "cheetah/machine.json"):
            shutil.copyfile(work / "results" / name, out / "results" / name)
    shutil.copyfile(src / ASV / "test" / "asv.conf.json", out / "asv.conf.json")
    shutil.copyfile(src / ASV / "LICENSE.rst", out / "LICENSE.rst")
    old = dst / "asv-astropy-pre-0.5" / "results" / "cheetah"
    old.mkdir(parents=True, exist_ok=True)
    for name in (*PRE_05, "machine.json"):
        shutil.copyfile(example / "cheetah" / name, old / name)
    shutil.copyfile(src / ASV / "LICENSE.rst", old.parent.parent / "LICENSE.rst")


def pytest_benchmark_sample(src: Path, dst: Path) -> None:
    runs = sorted((src / PYTEST_BENCHMARK / "tests" / "test_storage").glob("*.json"))
    out = dst / "pytest-benchmark"
    out.mkdir(parents=True, exist_ok=True)
    for p in runs[:4] + runs[-4:]:
        shutil.copyfile(p, out / p.name)
    shutil.copyfile(src / PYTEST_BENCHMARK / "LICENSE", out / "LICENSE")
    out = dst / "pytest-benchmark-lagom"
    shutil.copytree(src / LAGOM / ".benchmarks", out / ".benchmarks", dirs_exist_ok=True)
    shutil.copyfile(src / LAGOM / "LICENSE", out / "LICENSE")


def spyglass_sample(src: Path, dst: Path) -> None:
    data, out = src / SPYGLASS / "tests" / "data", dst / "asv-spyglass"
    (out / "results" / "rgx1gen11").mkdir(parents=True, exist_ok=True)
    for p in sorted(data.glob("*-*.json")):
        if p.name[:8] in ("a0f29428", "d6b286b8"):  # not synthetic_env_pins_numpy126.json
            shutil.copyfile(p, out / "results" / "rgx1gen11" / p.name)
    merged = {}
    for p in sorted(data.glob("*benchmarks.json")):
        merged.update(json.loads(p.read_text()))
    (out / "results" / "benchmarks.json").write_text(json.dumps(merged, indent=2, sort_keys=True))
    shutil.copyfile(src / SPYGLASS / "LICENSE.md", out / "LICENSE.md")


if __name__ == "__main__":
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    asv_sample(src, dst)
    pytest_benchmark_sample(src, dst)
    spyglass_sample(src, dst)
