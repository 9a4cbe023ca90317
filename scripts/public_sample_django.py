"""Build tests/data/public/asv-django/ from a checkout of django/django-asv (MIT; see
tests/data/public/README.md).

    python -m scripts.public_sample_django DJANGO_ASV_CHECKOUT tests/data/public

Keeps one machine and environment (``ubuntu-latest``, ``conda-py3.12``) over its newest
``COMMITS`` commits by commit date, unchanged: the stretch where asv's ``number`` went from
~89,000 to 1 (commit c9eb16a8 and every one after it, and single commits before), with the
runner's own order of them (its ``started_at``: many commits were measured after newer ones).
Beside them: the project's ``LICENSE`` and ``asv.conf.json``, asv's ``benchmarks.json`` and
the machine's ``machine.json``, as the repository has them. The same checkout gives the same
files.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

MACHINE, ENV, COMMITS = "ubuntu-latest", "conda-py3.12", 100
NAME = "asv-django"


def django_sample(src: Path, dst: Path) -> list[Path]:
    """Copy the sample from the checkout ``src`` into ``dst/asv-django``; -> its result files."""
    results = src / "results" / MACHINE
    files = sorted(results.glob(f"*-{ENV}.json"))
    dated = sorted((json.loads(p.read_text())["date"], p.name) for p in files)
    keep = [name for _, name in dated[-COMMITS:]]
    out = dst / NAME
    shutil.rmtree(out, ignore_errors=True)
    (out / "results" / MACHINE).mkdir(parents=True)
    for name in keep:
        shutil.copyfile(results / name, out / "results" / MACHINE / name)
    shutil.copyfile(results / "machine.json", out / "results" / MACHINE / "machine.json")
    shutil.copyfile(src / "results" / "benchmarks.json", out / "results" / "benchmarks.json")
    for name in ("LICENSE", "asv.conf.json"):
        shutil.copyfile(src / name, out / name)
    return [out / "results" / MACHINE / name for name in keep]


if __name__ == "__main__":
    kept = django_sample(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{len(kept)} result files of {MACHINE} {ENV} in {Path(sys.argv[2]) / NAME}")
