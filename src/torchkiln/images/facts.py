"""What an image that brings its own torch holds, read from the image without running it.

``[torch] source = "image"`` builds on a base such as NGC's PyTorch image (``nvcr.io/nvidia/pytorch``),
the PyTorch project's images or a site's own base: that image's torch is the torch, so the resolver
needs its facts before it decides anything: torch's version and CUDA, the Python it is installed
for, the pip constraints file, the SASS/PTX architectures compiled into ``libtorch_cuda.so``, and
whether the image has nvcc. They come from the image itself:

* :func:`facts_from_files` is the pure part: the contents of the few files that matter (torch's
  ``version.py``, its ``dist-info/METADATA``, ``/etc/pip/constraint.txt``, the CUDA toolkit's
  ``version.json``), the fat-binary entries of ``libtorch_cuda.so`` and the image config's
  environment and labels in, an :class:`ImageFacts` out;
* :func:`scan_layer` reads one layer's members once (from any reader: an archive by random access,
  the engine's ``save`` on a pipe, the engine's layer folders in place) and keeps only those paths:
  a few small files and the section table and fat-binary headers of one library; :func:`merge`
  stacks the layers (whiteouts applied) into their final state;
* :func:`read_image_facts` does that for an image of the local engine (in place from its storage
  where it can, else its ``save`` on a pipe; cached by image id), :func:`read_archive_facts` for a
  saved archive or OCI layout.

The model (:class:`~torchkiln.image_facts.ImageFacts`) and the knowledge base's NGC rows, a fallback
and a cross-check, never the source of truth, live in ``torchkiln.image_facts``: the resolver reads
facts without importing this package of image formats.

Our own code: no library reads these facts from an image without running it.
"""

from __future__ import annotations

import json
import posixpath
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchkiln.arch import ArchEntry, Capability
from torchkiln.errors import InputError
from torchkiln.image_facts import ImageFacts, mm
from torchkiln.images._io import IOStats
from torchkiln.images.archive import ImageArchive
from torchkiln.images.layers import Member

if TYPE_CHECKING:
    from torchkiln.engines import StoreEngine

#: the environment variables and labels worth keeping (NGC's names; the CUDA images' NVIDIA_REQUIRE_CUDA)
ENV_KEYS = (
    "NVIDIA_PYTORCH_VERSION", "PYTORCH_VERSION", "PYTORCH_BUILD_VERSION", "CUDA_VERSION", "CUDA_DRIVER_VERSION",
    "NVIDIA_REQUIRE_CUDA", "PIP_CONSTRAINT", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "PATH",
)
LABEL_PREFIXES = ("com.nvidia.", "org.opencontainers.image.")

_SITE = r"(?P<site>(?:[^/]+/)*lib/python(?P<py>3\.\d{1,2})/(?:site|dist)-packages)"
_TORCH_VERSION = re.compile(_SITE + r"/torch/version\.py")
_TORCH_METADATA = re.compile(_SITE + r"/torch-[^/]+\.dist-info/METADATA")
_LIBTORCH_CUDA = re.compile(_SITE + r"/torch/lib/libtorch_cuda\.so")
_PYTHON_BIN = re.compile(r"(?:[^/]+/)*bin/python3\.\d{1,2}")
_CUDA_JSON = re.compile(r"usr/local/cuda(?:-\d+\.\d+)?/version\.json")
_NVCC = re.compile(r"usr/local/cuda(?:-\d+\.\d+)?/bin/nvcc")
CONSTRAINTS = "etc/pip/constraint.txt"


def _wanted(path: str) -> str | None:
    """The kind of a path the facts need, else None."""
    if path == CONSTRAINTS:
        return "constraints"
    if path.endswith("/version.py") and _TORCH_VERSION.fullmatch(path):
        return "torch-version"
    if path.endswith("/METADATA") and _TORCH_METADATA.fullmatch(path):
        return "torch-metadata"
    if path.endswith("libtorch_cuda.so") and _LIBTORCH_CUDA.fullmatch(path):
        return "libtorch-cuda"
    if "/bin/python3." in f"/{path}" and _PYTHON_BIN.fullmatch(path):
        return "python"
    if path.startswith("usr/local/cuda"):
        if _CUDA_JSON.fullmatch(path):
            return "cuda-json"
        if _NVCC.fullmatch(path):
            return "nvcc"
    return None


# -- the pure part --------------------------------------------------------------------------------------


def _version_py(text: str) -> dict[str, str | None]:
    """``__version__``, ``cuda`` and ``git_version`` of torch/version.py (assignments of literals only)."""
    out: dict[str, str | None] = {}
    for m in re.finditer(r"^(__version__|cuda|git_version|hip)\s*(?::\s*[^=]+)?=\s*(.+?)\s*$", text, re.M):
        value = m.group(2)
        if value == "None":
            out[m.group(1)] = None
        else:
            lit = re.fullmatch(r"""(['"])(.*)\1""", value)
            if lit:
                out[m.group(1)] = lit.group(2)
    return out


def _metadata_version(text: str) -> str:
    m = re.search(r"^Version:\s*(\S+)\s*$", text, re.M)
    return m.group(1) if m else ""


def constraint_pins(text: str) -> dict[str, str]:
    """name -> the whole line, for each requirement line of a constraints file (comments dropped)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        out[canonicalize_name(req.name)] = line
    return out


def _cuda_json(text: str) -> str:
    try:
        data = json.loads(text)
        version = str(data["cuda"]["version"])
    except (ValueError, KeyError, TypeError):
        return ""
    m = re.match(r"(\d+\.\d+)", version)
    return m.group(1) if m else ""


@dataclass
class Collected:  # noqa: D101 - the merged state of the layers (see merge)
    """The final state of the wanted paths of an image: contents of small files, the fat-binary entries."""

    files: dict[str, bytes] = field(default_factory=dict)
    #: libtorch_cuda.so path -> its entries' arch names ("sm_90", "compute_120", LTO-IR left out)
    fatbins: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: paths that exist (regular files and links) among the wanted kinds without content (python, nvcc)
    present: set[str] = field(default_factory=set)
    links: dict[str, str] = field(default_factory=dict)


def facts_from_files(
    image: str,
    got: Collected,
    config: Mapping[str, Any] | None = None,
    *,
    image_id: str = "",
) -> ImageFacts:
    """The facts from what :func:`collect` kept; raises InputError when the image has no torch."""
    config = config or {}
    raw_cfg = config.get("config")
    cfg: dict[str, Any] = raw_cfg if isinstance(raw_cfg, dict) else {}
    raw_env = cfg.get("Env")
    env_list: list[Any] = raw_env if isinstance(raw_env, list) else []
    env: dict[str, str] = {}
    for item in env_list:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            if k in ENV_KEYS:
                env[k] = v
    got_labels = cfg.get("Labels")
    raw_labels: dict[Any, Any] = got_labels if isinstance(got_labels, dict) else {}
    labels = {str(k): str(v) for k, v in raw_labels.items() if str(k).startswith(LABEL_PREFIXES)}
    arch = config.get("architecture") if isinstance(config.get("architecture"), str) else ""
    platform = f"linux/{arch}" if arch else ""

    versions = sorted(p for p in got.files if _TORCH_VERSION.fullmatch(p))
    if not versions:
        raise InputError(
            f"{image} has no torch: no lib/python3.X/site-packages/torch/version.py (or dist-packages) in its "
            "file system.",
            hint="[torch] source = \"image\" needs a base that brings torch (nvcr.io/nvidia/pytorch, pytorch/pytorch, "
            "your site's torch image); for any other base use source = \"wheel\".",
        )
    notes: list[str] = []
    chosen = _prefer_system(versions)
    if len(versions) > 1:
        notes.append(f"the image has {len(versions)} torch installations ({', '.join('/' + v for v in versions)}); "
                     f"using /{chosen}")
    m = _TORCH_VERSION.fullmatch(chosen)
    assert m is not None
    site, py = m.group("site"), m.group("py")
    vp = _version_py(got.files[chosen].decode("utf-8", "replace"))
    version = vp.get("__version__") or ""
    meta_path = next((p for p in got.files if _TORCH_METADATA.fullmatch(p) and p.startswith(site + "/")), None)
    meta_version = _metadata_version(got.files[meta_path].decode("utf-8", "replace")) if meta_path else ""
    if not version:
        version = meta_version
    elif meta_version and meta_version != version:
        notes.append(f"torch/version.py says {version} but its METADATA says {meta_version}")
    if not version:
        raise InputError(f"{image}: /{chosen} names no torch version.", hint="The image's torch is broken; rebuild it.")
    torch_cuda = vp.get("cuda")

    exe = _python_exe(site, py, got)
    constraints_path, pin, count = "", "", 0
    if CONSTRAINTS in got.files:
        constraints_path = "/" + CONSTRAINTS
        pins = constraint_pins(got.files[CONSTRAINTS].decode("utf-8", "replace"))
        count = len(pins)
        pin = pins.get("torch", "")
    lib = f"{site}/torch/lib/libtorch_cuda.so"
    entries = got.fatbins.get(lib, ())
    if torch_cuda and lib not in got.fatbins:
        notes.append(f"torch is a CUDA {torch_cuda} build but /{lib} was not found")

    nvcc_home = sorted(p for p in got.present if _NVCC.fullmatch(p))
    cuda_json = sorted(p for p in got.files if _CUDA_JSON.fullmatch(p))
    nvcc_cuda, cuda_home = "", ""
    if nvcc_home or ("usr/local/cuda" in got.links and any(
            p.startswith(_link_target("usr/local/cuda", got) + "/bin/nvcc") for p in got.present)):
        cuda_home = "/usr/local/cuda"
        for p in cuda_json:
            nvcc_cuda = _cuda_json(got.files[p].decode("utf-8", "replace")) or nvcc_cuda
        nvcc_cuda = nvcc_cuda or mm(env.get("CUDA_VERSION", ""))
    return ImageFacts(
        image=image, origin="image", torch_version=version, torch_cuda=torch_cuda,
        torch_git=vp.get("git_version") or "", python=py, python_exe=exe, site="/" + site,
        constraints_path=constraints_path, constraints_torch=pin, constraints_count=count,
        arch_entries=tuple(sorted(set(entries), key=_arch_key)), arch_source=("/" + lib) if entries else "",
        nvcc_cuda=nvcc_cuda, cuda_home=cuda_home, image_id=image_id, platform=platform,
        env=tuple(sorted(env.items())), labels=tuple(sorted(labels.items())), notes=tuple(notes),
    )


def _link_target(path: str, got: Collected) -> str:
    target = got.links.get(path, path)
    return posixpath.normpath(posixpath.join(posixpath.dirname(path), target)).lstrip("/")


def _arch_key(name: str) -> tuple[int, int, str]:
    e = ArchEntry.parse(name)
    return (e.capability.number, 0 if e.kind == "sass" else 1, e.suffix)


def _prefer_system(paths: list[str]) -> str:
    """Of several torch installations, the one the image's python3 imports first (system, then /usr/local)."""
    order = ("usr/local/lib/", "usr/lib/", "opt/conda/lib/")
    return min(paths, key=lambda p: next((i for i, o in enumerate(order) if p.startswith(o)), len(order)))


def _python_exe(site: str, py: str, got: Collected) -> str:
    """The interpreter a site folder belongs to: Debian's dist-packages are /usr/bin/python3.X's."""
    if site.endswith("dist-packages") and site.startswith(("usr/local/lib/", "usr/lib/")):
        candidates = [f"usr/bin/python{py}", f"usr/local/bin/python{py}"]
    else:
        prefix = site.split("/lib/python", 1)[0]
        candidates = [f"{prefix}/bin/python{py}"]
    for c in candidates:
        if c in got.present:
            return "/" + c
    return "/" + candidates[0]


# -- reading an image -------------------------------------------------------------------------------------


@dataclass
class LayerPart:
    """What one layer holds of the wanted paths, and what it deletes below itself (whiteouts)."""

    whiteouts: list[tuple[str, str]] = field(default_factory=list)  # (path, "file" | "opaque")
    files: dict[str, bytes] = field(default_factory=dict)
    fatbins: dict[str, tuple[str, ...]] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)
    links: dict[str, str] = field(default_factory=dict)
    members: int = 0


#: file names whose content a hard link elsewhere in the same layer may need (uv and pip's caches
#: hard-link the files they install: torch/version.py is then a link to the cache's copy)
_LINK_TARGETS = ("torch/version.py", ".dist-info/METADATA", "torch/lib/libtorch_cuda.so", "etc/pip/constraint.txt",
                 "/version.json")


def _fatbin_archs(m: Member) -> tuple[str, ...]:
    from torchkiln.inspect.fatbin import FatbinError, read_fatbins

    try:
        with m.open_random() as f:
            listing = read_fatbins(f)
    except FatbinError as e:
        raise InputError(f"/{m.path} in the image is not a readable ELF library ({e}).",
                         hint="The image's torch is damaged; pull or rebuild it.") from None
    return tuple(sorted({e.arch for e in listing.entries if e.kind in ("sass", "ptx")}))


def scan_layer(members: Iterable[Member]) -> LayerPart:
    """One layer read once: small wanted files read, ``libtorch_cuda.so``'s fat-binary headers read.

    Works on any reader's members (an archive by random access, a ``save`` on a pipe, the engine's
    layer folders in place); a layer's scan does not depend on the others, so a stream that delivers
    layers before the manifest that orders them can be scanned as it passes. A wanted path that is a
    hard link gets the content of its target (read when the target passed, if it could be wanted).
    """
    part = LayerPart()
    #: possible hard-link targets of this layer: path -> small content, or the member (random access),
    #: or the fat-binary archs already read (a streamed layer)
    linkable: dict[str, bytes | Member | tuple[str, ...]] = {}
    for m in members:
        part.members += 1
        if m.whiteout is not None:
            part.whiteouts.append((m.path, m.whiteout))
            continue
        if m.type == "symlink" and m.path == "usr/local/cuda":
            part.links[m.path] = m.linkname
            continue
        kind = _wanted(m.path)
        if kind is None:
            if m.type == "file" and m.path.endswith(_LINK_TARGETS):
                if not m.path.endswith(".so"):
                    linkable[m.path] = m.read_all(limit=16 << 20)
                else:
                    linkable[m.path] = m if m.random_access else _fatbin_archs(m)
            continue
        if m.type in ("dir", "other"):
            continue
        part.present.add(m.path)
        if kind in ("python", "nvcc") or m.type == "symlink":
            continue
        if m.type == "hardlink":
            target = part.files.get(m.linkname) or part.fatbins.get(m.linkname) or linkable.get(m.linkname)
            if target is None:
                continue
            if isinstance(target, Member):
                target = _fatbin_archs(target)
                linkable[m.linkname] = target
            if kind == "libtorch-cuda":
                part.fatbins[m.path] = target if isinstance(target, tuple) else ()
            elif isinstance(target, bytes):
                part.files[m.path] = target
            continue
        if kind == "libtorch-cuda":
            part.fatbins[m.path] = _fatbin_archs(m)
        else:
            part.files[m.path] = m.read_all(limit=16 << 20)
    return part


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def merge(parts: Iterable[LayerPart]) -> Collected:
    """The final state of the wanted paths: each layer's whiteouts remove what lower layers hold, then
    its own entries replace theirs (bottom layer first)."""
    got = Collected()
    for part in parts:
        for path, kind in part.whiteouts:
            # a file whiteout deletes the path (and, for a folder, all under it); an opaque folder
            # hides everything lower layers put under it: both apply to the layers below only
            for store in (got.files, got.fatbins, got.links):
                for p in [p for p in store if _under(p, path) and (kind == "file" or p != path)]:
                    del store[p]
            got.present -= {p for p in got.present if _under(p, path) and (kind == "file" or p != path)}
        for p in part.present:
            got.files.pop(p, None)
            got.fatbins.pop(p, None)
        got.present |= part.present
        got.files.update(part.files)
        got.fatbins.update(part.fatbins)
        got.links.update(part.links)
    return got


def collect(layers: Iterable[Iterable[Member]]) -> Collected:
    """Scan and merge the layers (bottom first) of one image."""
    return merge(scan_layer(members) for members in layers)


def _image_id(config_raw: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(config_raw).hexdigest() if config_raw else ""


def read_archive_facts(path: Path, image: str, *, tag: str | None = None, stats: IOStats | None = None) -> ImageFacts:
    """The facts of a saved image (docker-archive or OCI layout, file or folder), read by random access."""
    from dataclasses import replace

    t0 = time.perf_counter()
    stats = stats or IOStats()
    with ImageArchive(path, tag=tag, stats=stats) as img:
        meta = img.meta
        got = collect(img.iter_layer(ref) for ref in meta.layers)
    facts = facts_from_files(image, got, meta.config, image_id=_image_id(meta.config_raw))
    return replace(facts, read="archive", bytes_read=stats.bytes_read, image_size=meta.archive_size,
                   seconds=round(time.perf_counter() - t0, 3))


def _cache_file(image_id: str) -> Path:
    from torchkiln.cache import kiln_cache_dir

    return kiln_cache_dir() / "image-facts" / f"{image_id.replace(':', '-')}.json"


def read_image_facts(
    image: str, engine: StoreEngine, *, progress: Callable[[str], None] | None = None, use_cache: bool = True,
    read: str = "auto",
) -> ImageFacts:
    """The facts of an image in the local engine, never running it.

    In place from the engine's layer folders where that works (:mod:`torchkiln.images.storage`: no
    export at all, only the wanted files are opened), else from the engine's ``save`` read once on a
    pipe (every byte passes, only the wanted ones are kept). ``read``: "auto", "direct" or "export".
    Kept in torchkiln's cache folder by image id, so a second resolve of the same image reads nothing
    (a new pull of the tag has a new id and is read again).
    """
    from dataclasses import replace

    from torchkiln.images.storage import iter_layer_dir, locate_in_engine, stored_meta
    from torchkiln.images.stream import read_saved_stream

    details = engine.inspect_image(image)
    cache = _cache_file(details.id) if details.id else None
    if use_cache and cache is not None and cache.is_file():
        try:
            return ImageFacts.from_dict(json.loads(cache.read_text()))
        except (ValueError, TypeError):
            pass  # a damaged cache entry: read the image again
    t0 = time.perf_counter()
    stats = IOStats()
    stored, reason = locate_in_engine(engine, image, details, read,
                                      direct_hint="Let kiln export it with the engine's save instead (read = auto).")
    if stored is None:
        how, why = "export", reason or "--read export"
        if progress:
            progress(f"reading the facts of {image}: {engine.name} save ({why})")
        with engine.save_stream(image) as fd:
            meta, parts = read_saved_stream(fd, image, image, scan_layer, stats)
        got = merge(parts)
    else:
        how, why = "direct", ""
        if progress:
            progress(f"reading the facts of {image} in place ({stored.driver})")
        meta = stored_meta(stored)
        got = merge(scan_layer(iter_layer_dir(folder, stats)) for folder in stored.layer_dirs)
    facts = facts_from_files(image, got, meta.config, image_id=details.id or _image_id(meta.config_raw))
    facts = replace(facts, read=how, read_note=why, bytes_read=stats.bytes_read, image_size=details.size,
                    seconds=round(time.perf_counter() - t0, 3))
    if use_cache and cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            part = cache.with_suffix(".part")
            part.write_text(json.dumps(facts.to_dict(), indent=1, sort_keys=True))
            part.replace(cache)
        except OSError:
            pass  # no cache folder: the next resolve reads the image again
    return facts


def capability_of(name: str) -> Capability:
    return ArchEntry.parse(name).capability
