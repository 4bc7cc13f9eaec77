#!/usr/bin/env python3
"""Build the layer of the user's own requirements (``workload.requirements``): the wheels their
model or loss imports beside torch and the runtime's packages.

It is built for the torch layer's target (its manifest: architecture, runtime, CPython ABI), so
both load on the same functions; it leaves out what the torch layer already holds and refuses
another version of it (Lambda unpacks all layers into one /opt/python); it installs exact pins
only, without resolving (``--no-deps``), and fails when an installed package requires one that
neither layer holds; it is ELF-scanned like the torch layer, and its size is counted with the
torch layer and the function code against Lambda's 250 MB. The manifest it writes last
(``requirements.json``: the file's sha256, the pins, the target) is what the synth checks.

``--local`` builds the same pins, with the same refusals and the same check that every package
they need is pinned or shipped, for this machine's interpreter instead (no Lambda target, no
scan): the layer that ``python -m local``'s emulated functions, ``planner workload new``,
``planner plan`` and the synth put on their path (fasdl.contract.requirements.local_layer), so
a model's packages work locally as on Lambda and never come from the project's own .venv.

    python layers/torch/requirements_layer.py --requirements FILE
        [--torch-layer layers/torch/dist] [--out layers/requirements/dist]
        [--function-dir functions] [--find-links DIR] [--index-url URL]
    python layers/torch/requirements_layer.py --local --requirements FILE --out DIR

Exit status: 0 built and compatible, 2 refused input, 3 the scan found problems (listed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import NoReturn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [p for p in (str(HERE), str(ROOT), str(ROOT / "functions")) if p not in sys.path]
from lambda_scan import LIMIT, MANIFEST, evaluate, inventory, summary  # noqa: E402
from packaging.markers import default_environment  # noqa: E402
from packaging.requirements import InvalidRequirement, Requirement  # noqa: E402
from runtime_deps import pip_install, read_requirements  # noqa: E402

from fasdl.contract.fields import PlanError  # noqa: E402
from fasdl.contract.requirements import (  # noqa: E402
    FIELD,
    REQUIREMENTS_MANIFEST,
    TORCH_PACKAGES,
    normalized,
    requirements_digest,
    user_pins,
)
from infra.lambda_runtime import (  # noqa: E402
    LambdaTarget,
    lambda_target,
    tree_bytes,
)

DEFAULT_OUT = ROOT / "layers" / "requirements" / "dist"
DEFAULT_TORCH_LAYER = ROOT / "layers" / "torch" / "dist"


def log(message: str) -> None:
    print(message, flush=True)


def die(message: str, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def torch_layer_target(torch_layer: Path) -> tuple[LambdaTarget, dict[str, object]]:
    """The target the torch layer was built for, from its manifest."""
    try:
        manifest = json.loads((torch_layer / MANIFEST).read_text())
        arch, python = str(manifest["arch"]), str(manifest["python"])
        target = lambda_target(arch, str(manifest["runtime"]),
                               python_override=f"{python[2]}.{python[3:]}")
    except (OSError, ValueError, KeyError, IndexError) as error:
        die(f"--torch-layer: no finished torch layer build in {torch_layer} ({error}); build "
            "it first (make layer), this layer is built for its target")
    return target, manifest


def installed(python_dir: Path) -> dict[str, str]:
    """normalized name -> version of every distribution in a layer's python/ folder."""
    found: dict[str, str] = {}
    for info in python_dir.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found[normalized(name)] = version
    return found


def marker_environment(target: LambdaTarget) -> dict[str, str]:
    """PEP 508 marker values of the functions' interpreter (not this machine's)."""
    version = f"{target.python[0]}.{target.python[1]}"
    return {"python_version": version, "python_full_version": f"{version}.0",
            "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_machine": target.machine, "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "extra": ""}


def missing_requirements(python_dir: Path, available: set[str],
                         environment: dict[str, str]) -> list[str]:
    """``package needs name`` for every requirement of an installed package that neither
    layer holds (requirements behind an extra or another platform's marker, as
    ``environment``'s PEP 508 values judge them, are skipped)."""
    missing = []
    for info in sorted(python_dir.glob("*.dist-info")):
        for line in (info / "METADATA").read_text(errors="replace").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            try:
                requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            if normalized(requirement.name) not in available:
                missing.append(f"{info.name.split('-')[0]} needs {requirement}")
    return missing


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Build the layer of workload.requirements.")
    p.add_argument("--requirements", type=Path, required=True,
                   help="the workload's requirements file (exact name==version pins)")
    p.add_argument("--torch-layer", type=Path, default=DEFAULT_TORCH_LAYER,
                   help="the built torch layer whose target this layer is built for "
                        "(default layers/torch/dist)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="the layer asset directory (default layers/requirements/dist)")
    p.add_argument("--function-dir", type=Path, default=ROOT / "functions",
                   help="function code counted with the layers against the 250 MB limit")
    p.add_argument("--find-links", type=Path, help="a folder of wheels pip may install from")
    p.add_argument("--index-url", help="the package index (default: pip's configuration)")
    p.add_argument("--local", action="store_true",
                   help="build for this machine's interpreter (python -m local, the planner "
                        "and the synth), not for the torch layer's Lambda target")
    return p.parse_args(argv)


def source_options(args: argparse.Namespace) -> list[str]:
    """Where pip may take the wheels from, as --find-links / --index-url asked (either build)."""
    options = []
    if args.find_links is not None:
        options += ["--find-links", str(args.find_links)]
    if args.index_url is not None:
        options += ["--index-url", args.index_url]
    return options


def install(args: argparse.Namespace, target: LambdaTarget, stage: Path) -> dict[str, str]:
    """The user's pins, installed for the target into ``stage/python``; returns them."""
    provided = installed(args.torch_layer / "python")
    try:
        pins = user_pins(args.requirements, provided)
    except PlanError as error:
        die(str(error))
    options = ["--no-deps", *source_options(args)]
    log(f"installing {', '.join(f'{n}=={v}' for n, v in pins.items())} for "
        f"{target.describe()}")
    try:
        pip_install([f"{name}=={version}" for name, version in pins.items()],
                    stage / "python", target, options)
    except RuntimeError as error:
        die(str(error))
    missing = missing_requirements(stage / "python",
                                   {*provided, *installed(stage / "python"), *TORCH_PACKAGES},
                                   marker_environment(target))
    if missing:
        die(f"--requirements: {args.requirements} does not pin everything its packages need "
            f"(pin each, e.g. from `pip freeze`): {'; '.join(missing)}")
    return pins


def build(args: argparse.Namespace, work: Path) -> int:
    target, torch_manifest = torch_layer_target(args.torch_layer)
    stage = work / "layer"
    pins = install(args, target, stage)
    log("Lambda compatibility scan of the layer")
    inv = inventory(stage, args.function_dir, progress=log)
    inv.other_layers_bytes = tree_bytes(args.torch_layer)
    report = evaluate(inv, target)
    print(summary(report), flush=True)
    if not report.ok:
        die(f"the layer is not compatible with {target.describe()}: {len(report.findings)} "
            f"findings ({', '.join(sorted(report.rules()))}) above", code=3)
    manifest = {"requirements_sha256": requirements_digest(args.requirements),
                "requirements": str(args.requirements), "pins": pins, "arch": target.arch,
                "runtime": target.runtime, "python": target.abi,
                "torch_layer_sha256": torch_manifest.get("sha256"),
                "layer_bytes": inv.layer_bytes}
    (stage / REQUIREMENTS_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    out: Path = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(stage, out)
    log(f"wrote {out}: {inv.layer_bytes / 1e6:,.1f} MB, with the torch layer and the function "
        f"code {report.total_bytes / 1e6:,.1f} MB of {LIMIT / 1e6:,.1f} MB")
    return 0


def shipped_here(pins: dict[str, str]) -> set[str]:
    """The runtime's pins, torch's packages and everything they require as installed in this
    interpreter: locally, what the torch layer holds on Lambda."""
    found: set[str] = set()
    pending = [*pins, *TORCH_PACKAGES]
    while pending:
        name = normalized(pending.pop())
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return found


def pip_failure(stderr: str) -> str:
    """pip's one line that says why (a pin not on the index: 'No matching distribution')."""
    errors = [line.removeprefix("ERROR:").strip() for line in stderr.splitlines()
              if line.startswith("ERROR:")]
    named = [line for line in errors if line.startswith("No matching distribution")]
    return (named or errors or [stderr.strip().splitlines()[-1] if stderr.strip() else
                                "pip failed without a message"])[-1]


def build_local(args: argparse.Namespace, work: Path) -> int:
    """The user's pins for this interpreter into ``args.out/python``: the refusals of the
    Lambda build (exact pins, nothing the functions ship in another version, every requirement
    pinned or shipped), then the manifest, then one rename so that concurrent builds of the
    same file never see half a layer. Raises PlanError naming workload.requirements."""
    provided = read_requirements()
    pins = user_pins(args.requirements, provided)
    stage = work / "layer"
    options = ["--no-deps", "--only-binary=:all:", *source_options(args)]
    specs = [f"{name}=={version}" for name, version in pins.items()]
    log(f"installing {', '.join(specs)} for this machine's Python {sys.version.split()[0]}")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                           "--target", str(stage / "python"), *options, *specs],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PlanError(FIELD, f"{args.requirements}: pip could not install "
                               f"{', '.join(specs)}: {pip_failure(done.stderr)}")
    missing = missing_requirements(
        stage / "python", {*shipped_here(provided), *installed(stage / "python")},
        {key: str(value) for key, value in default_environment().items()} | {"extra": ""})
    if missing:
        raise PlanError(FIELD, f"{args.requirements} does not pin everything its packages "
                               f"need (pin each, e.g. from `pip freeze`): {'; '.join(missing)}")
    manifest = {"requirements_sha256": requirements_digest(args.requirements),
                "requirements": str(args.requirements), "pins": pins, "target": "local",
                "python": sys.implementation.cache_tag}
    (stage / REQUIREMENTS_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    out: Path = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = out.parent / f".{out.name}.{os.getpid()}"
    shutil.copytree(stage, staged)
    try:
        os.rename(staged, out)
    except OSError:  # built meanwhile by another process (same file, same pins): keep theirs
        shutil.rmtree(staged, ignore_errors=True)
        if not (out / REQUIREMENTS_MANIFEST).is_file():
            raise
    log(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.requirements.is_file():
        die(f"--requirements: {args.requirements} not found")
    with tempfile.TemporaryDirectory(prefix="fasdl-requirements-layer-") as tmp:
        if args.local:
            try:
                return build_local(args, Path(tmp))
            except PlanError as error:
                die(str(error))
        return build(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
