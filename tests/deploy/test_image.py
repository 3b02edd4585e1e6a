"""The container image without a Docker engine: hadolint on the Dockerfile, and the Dockerfile's own two install
steps (scripts/image-install.sh build, then install from those wheels only, offline) run for real here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_runtime_stage_is_non_root_and_runs_the_watcher() -> None:
    text = DOCKERFILE.read_text()
    runtime = text[text.index("AS runtime") :]
    assert re.search(r"^USER \d+:\d+$", runtime, re.MULTILINE), "the runtime user must be numeric"
    assert 'ENTRYPOINT ["fightwatch", "run"]' in runtime
    assert not re.search(r"apt-get install|gcc|build-essential", runtime)


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    """.dockerignore admits only what it names: every COPY from the context must be named there."""
    admitted = {line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line[:1] == "!"}
    copied = []
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from") for word in words):
            copied += [source.rstrip("/") for source in words[1:-1]]
    assert copied
    missing = [source for source in copied if not any(source == a or source.startswith(a + "/") for a in admitted)]
    assert not missing, f"COPY of paths .dockerignore leaves out of the build context: {missing}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_build_stage_takes_rust_from_an_official_image_and_builds_the_locked_crates() -> None:
    """The build stage's Rust is an official `rust:` image's toolchain, pinned to a release at native/Cargo.toml's
    rust-version or later (none from apt); the crates are fetched and built at the versions Cargo.lock pins
    (--locked), each from crates.io with its checksum."""
    text = DOCKERFILE.read_text()
    build = text.split("AS runtime")[0]
    image = re.search(r"^ARG RUST_IMAGE=rust:(\d+\.\d+\.\d+)-slim-bookworm$", text, re.MULTILINE)
    assert image is not None, "the build stage's Rust must come from an official rust: image, pinned by version"
    assert re.search(r"^FROM \$\{RUST_IMAGE\} AS rust$", text, re.MULTILINE)
    for directory in ("/usr/local/cargo", "/usr/local/rustup"):
        assert f"COPY --from=rust {directory} {directory}" in build
    assert not re.search(r"librust-|apt-get install[^&]*\bcargo\b", build), "Rust from apt as well"
    manifest = tomllib.loads((REPO / "native" / "Cargo.toml").read_text())["package"]
    assert _version(image.group(1)) >= _version(manifest["rust-version"])
    assert "RUN scripts/native.sh" in build
    assert "cargo fetch --locked" in (REPO / "scripts" / "native.sh").read_text()
    assert 'cargo_manifest_args=["--locked"]' in (REPO / "setup.py").read_text()
    lock = tomllib.loads((REPO / "native" / "Cargo.lock").read_text())["package"]
    crates = [package for package in lock if package["name"] != manifest["name"]]
    assert crates
    for crate in crates:
        assert crate.get("source") == "registry+https://github.com/rust-lang/crates.io-index", crate["name"]
        assert re.fullmatch(r"[0-9a-f]{64}", crate.get("checksum", "")), crate["name"]


def test_the_image_install_steps_build_a_working_fightwatch(tmp_path: Path) -> None:
    text = DOCKERFILE.read_text()
    assert "scripts/image-install.sh build /wheels" in text
    assert "image-install.sh install /wheels /opt/fightwatch" in text
    assert "RUN scripts/native.sh" in text
    script = REPO / "scripts" / "image-install.sh"
    wheels, prefix = tmp_path / "wheels", tmp_path / "opt"
    # The machine's Rust (rustup's cargo, which runs the toolchain under RUSTUP_HOME) and nothing else on PATH but
    # the system's, as the image's build stage has the Rust image's; there, too, the native engine is required.
    cargo = shutil.which("cargo")
    assert cargo is not None, "no cargo on PATH (install Rust, e.g. with rustup)"
    env = {
        "PATH": f"{Path(cargo).parent}:/usr/bin:/bin",
        "PYTHON": sys.executable,
        "HOME": str(tmp_path),
        "CARGO_HOME": os.environ.get("CARGO_HOME", str(Path.home() / ".cargo")),
        "RUSTUP_HOME": os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
        "CARGO_TARGET_DIR": str(tmp_path / "target"),
        "FIGHTWATCH_REQUIRE_NATIVE": "1",
    }
    fetch = subprocess.run(
        [str(REPO / "scripts" / "native.sh")], cwd=REPO, capture_output=True, text=True, env=env, check=False
    )
    assert fetch.returncode == 0, fetch.stderr[-3000:]
    build = subprocess.run(
        [str(script), "build", str(wheels)], cwd=REPO, capture_output=True, text=True, env=env, check=False
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("fightwatch-*.whl")
    assert not wheel.name.endswith("-none-any.whl"), f"{wheel.name}: the per-event modules were not compiled"
    install = subprocess.run(
        [str(script), "install", str(wheels), str(prefix)], capture_output=True, text=True, env=env, check=False
    )
    assert install.returncode == 0, install.stderr[-3000:]
    assert list(prefix.glob("lib/python*/site-packages/watcher/detection/engine.*.so")), "no compiled engine"
    assert list(prefix.glob("lib/python*/site-packages/watcher/_native.*.so")), "no native engine"
    version = subprocess.run(
        [str(prefix / "bin" / "fightwatch"), "--version"], capture_output=True, text=True, check=False
    )
    assert "compiled with mypyc, engine: native" in version.stdout, version.stdout + version.stderr
    demo = subprocess.run(
        [str(prefix / "bin" / "fightwatch"), "demo", "--output", "json"], capture_output=True, check=False
    )
    assert demo.returncode == 0, demo.stderr
    assert b'"type":"fight"' in demo.stdout.replace(b" ", b"")


@pytest.mark.parametrize("required", [True, False], ids=["make test", "make demo"])
def test_a_crate_that_does_not_download_is_named_and_stops_only_a_run_that_requires_the_native_engine(
    tmp_path: Path, required: bool
) -> None:
    """An empty cargo home with the network off: no crate can be had. `make test` (FIGHTWATCH_REQUIRE_NATIVE=1)
    stops, naming the crate; `make demo` goes on without the native engine, saying why."""
    env = {**os.environ, "CARGO_HOME": str(tmp_path / "cargo"), "CARGO_NET_OFFLINE": "true"}
    env["FIGHTWATCH_REQUIRE_NATIVE"] = "1" if required else "0"
    done = subprocess.run(
        [str(REPO / "scripts" / "native.sh")], capture_output=True, text=True, check=False, env=env, timeout=300
    )
    assert re.search(r"could not fetch crate [a-z0-9_-]+ from crates\.io", done.stderr), done.stderr
    if required:
        assert done.returncode == 1
        assert "stopping" in done.stderr
    else:
        assert done.returncode == 0
        assert "without the native engine" in done.stderr
