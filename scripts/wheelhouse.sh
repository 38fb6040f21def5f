#!/usr/bin/env bash
# A folder of wheels for an offline host: the tuner wheel built from this checkout, everything it
# needs, and optional extras, for the host's Python version and platform, with a manifest.
#
# Usage: scripts/wheelhouse.sh --python 3.12 --platform manylinux_2_28_x86_64 --out DIR
#                              [--extras serving,torchao,bitsandbytes,dashboard,...] [--minimal] [--dry-run]
#   --extras   serving: what `transformers serve` needs and the H200 image lacks, at versions that
#                       worked there (docs/findings/h200-transformers.md);
#              torchao, bitsandbytes: quantization on that image (torchao 0.18.0, bitsandbytes 0.50.2);
#              any other name is an extra of the tuner itself (dashboard, postgres, ray).
#   --minimal  leave out what the H200 image already has (engines/hosts/h200-cuda-image.txt: torch,
#              transformers, tokenizers, numpy, httpx, rich, typer, psutil, uvloop, pyyaml, ...) and
#              plotly (imported only by `tune report -f html`: render HTML where the study is
#              imported), and resolve the rest against exactly those versions: the folder fits the
#              device tool's 64 MiB per call (about 9 MiB).
#   --dry-run  resolve and write the manifest (hashes from the index), download nothing.
#
# The manifest, DIR/manifest.txt, is a pip requirements file: one `name==version --hash=sha256:...`
# per wheel with its file name and size; install on the offline host with
#   python3 -m pip install --no-index --find-links DIR --require-hashes --no-deps [--target SITE] -r DIR/manifest.txt
# (--no-deps: the host's own packages are the rest; the resolution here already checked they fit).
#
# It needs a Python of the target version to resolve with ($PYTHON, python3.12 on PATH, or pyenv's).
#
# An engine's own wheelhouse (vLLM, SGLang: resolved against the host's packages, in parts, with its
# install script) is `tune engine kit`; `scripts/wheelhouse.sh --engine vllm==0.25.1 [its options]`
# runs that (docs/engines.md#offline-gpu-hosts-engine-kits-and-installed-folders).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--engine" ]; then
  shift
  exec "${TUNE:-.venv/bin/tune}" engine kit "$@"
fi

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
VERSION="" PLATFORM="" OUT="" EXTRAS="" MINIMAL=0 DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) VERSION="$2"; shift 2 ;;
    --platform) PLATFORM="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --extras) EXTRAS="$2"; shift 2 ;;
    --minimal) MINIMAL=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage ;;
    *) echo "wheelhouse.sh: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$VERSION" ] && [ -n "$PLATFORM" ] && [ -n "$OUT" ] || usage
[[ "$VERSION" =~ ^3\.[0-9]+$ ]] || { echo "wheelhouse.sh: --python takes X.Y, got $VERSION" >&2; exit 2; }

# pip judges markers and Requires-Python by the Python that runs it (numpy 2.5 needs >= 3.12 and
# resolves to nothing on 3.11): the resolution needs a Python of the target version.
if [ -z "${PYTHON:-}" ]; then
  for candidate in "python$VERSION" "$(pyenv root 2>/dev/null)"/versions/"$VERSION"*/bin/"python$VERSION"; do
    if "$candidate" -c "" 2>/dev/null; then PYTHON="$candidate"; break; fi
  done
fi
RUNNING="$("${PYTHON:-python3}" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
if [ "$RUNNING" != "$VERSION" ]; then
  echo "wheelhouse.sh: needs a Python $VERSION to resolve for it (found ${RUNNING:-none});" \
       "install one, or set PYTHON=/path/to/python$VERSION" >&2
  exit 2
fi

# pip takes a platform tag literally: a manylinux_2_28 host also runs manylinux_2_17 (manylinux2014)
# ... manylinux_2_5 (manylinux1) wheels, so every older tag is named too.
PLATFORM_ARGS=(--platform "$PLATFORM")
if [[ "$PLATFORM" =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
  glibc="${BASH_REMATCH[1]}" arch="${BASH_REMATCH[2]}"
  for ((m = glibc - 1; m >= 5; m--)); do PLATFORM_ARGS+=(--platform "manylinux_2_${m}_$arch"); done
  [ "$glibc" -ge 17 ] && PLATFORM_ARGS+=(--platform "manylinux2014_$arch")
  [ "$glibc" -ge 12 ] && PLATFORM_ARGS+=(--platform "manylinux2010_$arch")
  PLATFORM_ARGS+=(--platform "manylinux1_$arch")
fi
TARGET=(--only-binary=:all: --python-version "$VERSION" --implementation cp "${PLATFORM_ARGS[@]}")

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"

echo "building the tuner wheel..."
"$PYTHON" -m pip wheel -q --no-deps -w "$TMP/tuner" . >/dev/null
TUNER_WHEEL="$(ls "$TMP"/tuner/tuner-*.whl)"

tuner_extras=() pins=()
IFS=',' read -ra wanted <<<"$EXTRAS"
for e in "${wanted[@]}"; do
  case "$e" in
    "") ;;
    serving) pins+=(fastapi==0.120.4 starlette==0.49.3 uvicorn==0.54.0 pydantic==2.14.4
                    pydantic-core==2.50.5 openai==1.109.1) ;;
    torchao) pins+=(torchao==0.18.0) ;;
    bitsandbytes) pins+=(bitsandbytes==0.50.2) ;;
    *) tuner_extras+=("$e") ;;
  esac
done
extras_spec=""
[ ${#tuner_extras[@]} -gt 0 ] && extras_spec="[$(IFS=,; echo "${tuner_extras[*]}")]"

HAVE=()
[ "$MINIMAL" -eq 1 ] && HAVE=(-c engines/hosts/h200-cuda-image.txt)
echo "resolving for cp${VERSION/./} $PLATFORM..."
"$PYTHON" -m pip install -q --dry-run --ignore-installed --target "$TMP/site" --report "$TMP/report.json" \
  "${TARGET[@]}" "${HAVE[@]}" "tuner${extras_spec} @ file://$TUNER_WHEEL" "${pins[@]}"

# The wheels to fetch (everything resolved, less what the host has) as hash-pinned requirements.
"$PYTHON" - "$TMP/report.json" "$MINIMAL" engines/hosts/h200-cuda-image.txt "$TMP/fetch.txt" <<'PY'
import json, re, sys
report, minimal, have_file, fetch = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
have = {norm(l.split("==")[0]) for l in open(have_file) if l.strip() and not l.startswith("#")}
with open(fetch, "w") as out:
    for item in json.load(open(report))["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if norm(name) == "tuner" or (minimal and (norm(name) in have or norm(name) == "plotly")):
            continue
        info = item["download_info"]
        sha = info["archive_info"]["hashes"]["sha256"]
        out.write(f"{name}=={version} --hash=sha256:{sha}  # {info['url'].rsplit('/', 1)[-1]}\n")
PY

if [ "$DRY" -eq 0 ]; then
  echo "downloading $(wc -l <"$TMP/fetch.txt") wheels..."
  "$PYTHON" -m pip download -q --no-deps --require-hashes "${TARGET[@]}" -d "$OUT" -r "$TMP/fetch.txt"
  cp "$TUNER_WHEEL" "$OUT/"
fi

"$PYTHON" - "$TMP/fetch.txt" "$TUNER_WHEEL" "$OUT" "$DRY" "$MINIMAL" "cp${VERSION/./} $PLATFORM" \
  "$EXTRAS" <<'PY'
import hashlib, os, re, sys
fetch, tuner_wheel, out, dry, minimal, target, extras = sys.argv[1:]
dry, minimal = dry == "1", minimal == "1"
rows = []  # (name, version, sha256, file)
for line in open(fetch):
    m = re.match(r"(\S+)==(\S+) --hash=sha256:(\w+)  # (\S+)", line)
    rows.append(m.groups())
name, version = os.path.basename(tuner_wheel).split("-")[:2]
rows.append((name, version, hashlib.sha256(open(tuner_wheel, "rb").read()).hexdigest(),
             os.path.basename(tuner_wheel)))
total = 0
lines = []
for name, version, sha, file in sorted(rows, key=lambda r: r[0].lower()):
    size = None
    if not dry:
        data = open(os.path.join(out, file), "rb").read()
        if hashlib.sha256(data).hexdigest() != sha:
            sys.exit(f"wheelhouse.sh: {file}: sha256 differs from the index's")
        size = len(data)
        total += size
    lines.append(f"{name}=={version} --hash=sha256:{sha}  # {file}"
                 + (f" {size / 1e6:.2f} MB" if size is not None else ""))
profile = "minimal (without engines/hosts/h200-cuda-image.txt)" if minimal else "full"
size_note = "dry run: nothing downloaded" if dry else f"{total / 2**20:.1f} MiB"
header = [
    f"# tuner wheelhouse: {target}, profile {profile}, extras '{extras}'",
    f"# {len(lines)} wheels, {size_note}. Install on the offline host with",
    "#   python3 -m pip install --no-index --find-links DIR --require-hashes --no-deps [--target SITE] -r DIR/manifest.txt",
]
open(os.path.join(out, "manifest.txt"), "w").write("\n".join(header + lines) + "\n")
print(f"{len(lines)} wheels, {size_note}: {out}/manifest.txt")
PY
