"""scripts/install.py, make setup's installer: uv with pip's settings, pip where uv cannot."""

from __future__ import annotations

import os
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

from scripts import install


def test_pips_settings_are_read_as_pip_weighs_them(tmp_path, monkeypatch):
    """A file's [install] section over its [global], a PIP_* variable over both."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = file:///g1 file:///g2\nfind-links = /g\n"
                    "no-index = false\n[install]\nfind-links = /i\n"
                    "[download]\nsrc = /d\n")  # fmt: skip
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "7")
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = install.pip_settings()
    assert settings["extra-index-url"] == "file:///g1 file:///g2"
    assert settings["find-links"] == "/i" and settings["default-timeout"] == "7"
    assert "src" not in settings  # another command's section
    monkeypatch.setenv("PIP_FIND_LINKS", "/e")
    assert install.pip_settings()["find-links"] == "/e"


def test_each_setting_has_its_uv_option_and_one_without_is_named():
    args, env = install.uv_options({
        "extra-index-url": "file:///a file:///b", "find-links": "/w", "no-index": "false",
        "constraint": "/c.txt", "cert": "/ca.crt", "default-timeout": "180",
        "disable-pip-version-check": "1", "config-file": "/pip.conf",
    })  # fmt: skip
    assert args == ["--constraint", "/c.txt", "--extra-index-url", "file:///a",
                    "--extra-index-url", "file:///b", "--find-links", "/w"]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/ca.crt", "UV_HTTP_TIMEOUT": "180"}
    assert install.uv_options({"no-index": "yes"})[0] == ["--no-index"]
    with pytest.raises(ValueError, match="pre='1'"):
        install.uv_options({"find-links": "/w", "pre": "1"})


def tiny_wheel(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "ragtiny-1.0-py3-none-any.whl"
    info = "ragtiny-1.0.dist-info"
    files = {"ragtiny/__init__.py": "VALUE = 1\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: ragtiny\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}  # fmt: skip
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.mark.parametrize("pre, installer", [(None, "uv"), ("1", "pip")])
def test_a_fresh_environment_gets_the_wheel_from_pips_settings(tmp_path, pre, installer):
    """The wheel is found only through a find-links of pip's (PIP_FIND_LINKS): uv installs and
    compiles it; with a setting uv's options do not translate (PIP_PRE), pip does, and says
    why. (uv itself comes from pip's indexes: this test needs them, as make setup does.)"""
    wheels = tiny_wheel(tmp_path / "wheels").parent
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {**os.environ, "PIP_FIND_LINKS": f"{os.environ.get('PIP_FIND_LINKS', '')} {wheels}"}
    if pre:
        env["PIP_PRE"] = pre
    out = subprocess.run([python, "-m", "scripts.install", "ragtiny==1.0"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    fallback = "scripts.install: pip installs (pip's setting pre='1' has no uv counterpart here)"
    assert (fallback in out.stderr) == bool(pre), out.stderr
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    assert (site / "ragtiny-1.0.dist-info" / "INSTALLER").read_text().strip() == installer
    assert list((site / "ragtiny" / "__pycache__").glob("__init__.*.pyc"))
    check = [python, "-c", "import ragtiny; print(ragtiny.VALUE)"]
    assert subprocess.run(check, capture_output=True, text=True, cwd=tmp_path).stdout == "1\n"
