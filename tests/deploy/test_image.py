"""The container image: hadolint on the Dockerfile, the Dockerfile's own two install steps (scripts/image-install.sh
build, then install from those wheels only, offline) run here, and the image built for real with buildah
(scripts/image.sh) and run from its archive with runc, as a node would run it: read-only, as its numeric user."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.image import ImageError, build_image

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


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


# --- the image built for real ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltImage:
    name: str
    archive: Path
    rootfs: Path
    config: dict[str, object]  # the image's runtime config (User, Env, Entrypoint, ...)
    repo_tags: list[str]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _unpack(archive: Path, into: Path) -> tuple[dict[str, object], list[str]]:
    """Lay the docker-archive's layers out in order, as a container runtime does: whiteouts first, then the files."""
    with tarfile.open(archive) as outer:
        (manifest,) = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(outer.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        into.mkdir()
        for layer in manifest["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as tar:
                members = tar.getmembers()
                for member in members:
                    path = Path(member.name)
                    if path.name == ".wh..wh..opq":
                        for child in (into / path.parent).iterdir():
                            _remove(child)
                    elif path.name.startswith(".wh."):
                        _remove(into / path.parent / path.name.removeprefix(".wh."))
                kept = [member for member in members if not Path(member.name).name.startswith(".wh.")]
                tar.extractall(into, members=kept, numeric_owner=True, filter="tar")
    return config["config"], manifest["RepoTags"]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImage]:
    """Build the image once (scripts/image.sh with buildah; a warm build takes seconds) and unpack its archive."""
    try:
        built = build_image()
    except ImageError as exc:
        pytest.fail(str(exc))
    rootfs = tmp_path_factory.mktemp("image") / "rootfs"
    config, repo_tags = _unpack(built.archive, rootfs)
    yield BuiltImage(built.name, built.archive, rootfs, config, repo_tags)
    shutil.rmtree(rootfs)  # (a quarter of a gigabyte)


_container_ids = itertools.count()


def _run(image: BuiltImage, *args: str, bundle: Path) -> subprocess.CompletedProcess[str]:
    """Run ARGS in the image with runc as a node would: its user, its environment, a read-only root filesystem."""
    runc = shutil.which("runc")
    assert runc is not None, "no runc (scripts/image.sh installs it)"
    bundle.mkdir(exist_ok=True)
    (bundle / "config.json").unlink(missing_ok=True)
    subprocess.run([runc, "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    uid, gid = (int(part) for part in str(image.config["User"]).split(":"))
    spec["root"] = {"path": str(image.rootfs), "readonly": True}
    spec["process"].update(
        terminal=False, args=list(args), env=image.config["Env"], cwd="/", user={"uid": uid, "gid": gid}
    )
    (bundle / "config.json").write_text(json.dumps(spec))
    container = f"fightwatch-image-test-{os.getpid()}-{next(_container_ids)}"
    try:
        return subprocess.run(
            [runc, "run", "--bundle", str(bundle), container], capture_output=True, text=True, check=False, timeout=120
        )
    finally:
        subprocess.run([runc, "delete", "--force", container], capture_output=True, check=False)


def test_the_built_image_is_named_and_runs_the_watcher_as_its_numeric_user(image: BuiltImage) -> None:
    assert image.repo_tags == [image.name], "the archive must carry the image's name (ctr images import)"
    assert image.config["User"] == "65532:65532"
    assert image.config["Entrypoint"] == ["fightwatch", "run"]


def test_the_built_image_runs_read_only_as_uid_65532_with_both_compiled_parts(
    image: BuiltImage, tmp_path: Path
) -> None:
    python = "/opt/fightwatch/bin/python"
    who = _run(image, python, "-c", "import os; print(os.getuid(), os.getgid())", bundle=tmp_path)
    assert who.stdout.split() == ["65532", "65532"], who.stderr
    version = _run(image, "fightwatch", "--version", bundle=tmp_path)
    assert "compiled with mypyc, engine: native" in version.stdout, version.stdout + version.stderr
    native = _run(image, python, "-c", "import watcher._native", bundle=tmp_path)
    assert native.returncode == 0, native.stderr
    for command in (["fightwatch", "--help"], ["fightwatch", "run", "--help"]):
        done = _run(image, *command, bundle=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "usage:" in done.stdout
    write = _run(image, python, "-c", "open('/tmp/probe', 'w')", bundle=tmp_path)
    assert "Read-only file system" in write.stderr, "the root filesystem was not read-only: the checks above prove less"


def test_the_built_image_has_no_compiler_no_pip_and_no_certificate_of_the_build_host(image: BuiltImage) -> None:
    root = image.rootfs
    compilers = [
        path
        for pattern in ("usr/bin/*gcc*", "usr/bin/cc", "usr/bin/rustc", "usr/local/cargo")
        for path in root.glob(pattern)
    ]
    assert not compilers, compilers
    assert not list(root.glob("opt/fightwatch/lib/python*/site-packages/pip")), "pip in the runtime environment"
    # The build mounts the host's bundle (it holds the registries' proxy's certificate): no file may be a copy of it.
    host = HOST_CA_BUNDLE.read_bytes()
    copies = [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and path.stat().st_size == len(host) and path.read_bytes() == host
    ]
    assert not copies, f"the build host's CA bundle is in the image: {copies}"
    assert (root / "etc/ssl/certs/ca-certificates.crt").is_file(), "no CA bundle of the image's own (ca-certificates)"
