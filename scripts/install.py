"""Install into the running Python's environment what ``pip install ARGS`` would (make setup).

    .venv/bin/python -m scripts.install torch==2.14.1 torchvision==0.29.1 -e '.[dev]'

uv installs them where it can do so as pip would: pip unpacks one wheel at a time, and the CUDA
build of torch brings 3.2 GB of NVIDIA libraries (a fresh clone's `make setup`, back to back on
the idle 2-core machine: pip, then compileall on both cores, 2 min 37 s; uv, unpacking and
compiling on both cores, 55 s; the same packages and 15,907 .pyc).

uv chooses what pip would: it reads no configuration of its own (``--no-config``) and keeps no
cache (``--no-cache``); pip's settings (its files and ``PIP_*`` variables, which ``make trust``
vets in the trusted jobs) become uv's options, and it takes the best version across every index,
as pip does (``--index-strategy unsafe-best-match``). pip installs instead, as before, with one
line that says why, where pip's settings hold one this translation does not know, where uv
cannot be installed (pinned, from pip's indexes), or where uv fails.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

UV = "uv==0.13.9"
# pip's settings (``pip config list``: a file's [global] or [install] section, or a PIP_*
# variable, which wins) and what uv takes for each.
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
         "find-links": "--find-links", "constraint": "--constraint",
         "trusted-host": "--allow-insecure-host"}  # fmt: skip
SWITCHES = {"no-index": "--no-index"}
ENV = {"cert": "SSL_CERT_FILE", "default-timeout": "UV_HTTP_TIMEOUT", "timeout": "UV_HTTP_TIMEOUT"}
ABOUT_PIP = {"disable-pip-version-check", "no-cache-dir", "no-input", "progress-bar", "quiet",
             "root-user-action", "no-compile", "config-file"}  # fmt: skip
SECTIONS = ("global", "install", ":env:")  # in pip's order of precedence, the last wins


def pip_settings() -> dict[str, str]:
    """pip's settings for ``pip install``, by name (``extra-index-url``): the value that wins."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    found: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if section in SECTIONS:
            rank = SECTIONS.index(section)
            if rank >= found.get(key, (-1, ""))[0]:
                found[key] = (rank, ast.literal_eval(value))
    return {key: value for key, (_, value) in found.items()}


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(uv's options, its environment) for pip's ``settings``; ValueError names a setting that
    has no translation here."""
    args, env = [], {}
    for key, value in sorted(settings.items()):
        if key in FLAGS:
            args += [part for item in value.split() for part in (FLAGS[key], item)]
        elif key in SWITCHES:
            args += [SWITCHES[key]] if value.lower() in ("1", "true", "yes", "on") else []
        elif key in ENV:
            env[ENV[key]] = value
        elif key not in ABOUT_PIP:
            raise ValueError(f"pip's setting {key}={value!r} has no uv counterpart here")
    return args, env


def with_uv(args: list[str]) -> str | None:
    """Install ``args`` with uv -> None, or why it did not."""
    try:
        options, env = uv_options(pip_settings())
    except (ValueError, subprocess.CalledProcessError, SyntaxError) as e:
        return str(e)
    # -qq: not pip's warning for each configured index that lacks uv
    pip = [sys.executable, "-m", "pip", "install", "-qq", "--no-compile", UV]
    if subprocess.run(pip).returncode:
        return f"pip could not install {UV}"
    uv = [sys.executable, "-m", "uv", "pip", "install", "--python", sys.executable, "--quiet",
          "--no-config", "--no-cache", "--index-strategy", "unsafe-best-match",
          "--compile-bytecode", *options, *args]  # fmt: skip
    if subprocess.run(uv, env={**os.environ, **env}).returncode:
        return "uv failed (above)"
    return None


def with_pip(args: list[str]) -> int:
    """pip installs without compiling, then compileall compiles what it installed on every core
    (3 min 4 s -> 2 min 39 s for a fresh clone's set-up; the same 15,907 .pyc). Like pip, it
    does not stop on a file this Python cannot compile (a cache, not the install)."""
    rc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                         *args]).returncode  # fmt: skip
    if rc == 0:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                        str(Path(sys.prefix) / "lib")], capture_output=True)  # fmt: skip
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.install",
        description=__doc__.split("\n\n")[0],
        epilog="Run it with the Python of the environment to install into (.venv/bin/python).",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="what pip install takes")
    opts = parser.parse_args(argv)
    if not opts.args:
        parser.error("nothing to install")
    why = with_uv(opts.args)
    if why is None:
        return 0
    print(f"scripts.install: pip installs ({why})", file=sys.stderr)
    return with_pip(opts.args)


if __name__ == "__main__":
    sys.exit(main())
