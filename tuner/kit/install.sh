#!/usr/bin/env bash
# Install an engine kit made by `tune engine kit` on an offline host: verify every part and the
# whole, then every wheel against the manifest's sha256, and install into an empty folder.
# Usage: bash install.sh --target DIR [--from PARTS_DIR] [--python PYTHON]
#   --from    where the parts and SHA256SUMS are (default: this script's folder)
#   --python  the interpreter the engine runs under (default: python3 on PATH); recorded in the folder
set -euo pipefail
KIT_NAME=@KIT_NAME@
ENGINE=@ENGINE@ PACKAGE=@PACKAGE@ VERSION=@VERSION@
FROM="$(cd "$(dirname "$0")" && pwd)" TARGET="" PY="python3"
usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET="$2"; shift 2 ;;
    --from) FROM="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "install.sh: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$TARGET" ] || usage
PY="$(command -v "$PY")" || { echo "install.sh: no interpreter $PY on PATH (--python)" >&2; exit 2; }
if [ -e "$TARGET" ] && [ -n "$(ls -A "$TARGET" 2>/dev/null)" ]; then
  # pip --target keeps what a folder already holds: an old version would shadow the new one.
  echo "install.sh: $TARGET is not empty: install into a new folder, or remove it first" >&2; exit 2
fi
cd "$FROM"
[ -f SHA256SUMS ] || { echo "install.sh: no SHA256SUMS in $FROM" >&2; exit 2; }
missing=0
while read -r sum name; do
  case "$name" in "$KIT_NAME") continue ;; esac
  [ -f "$name" ] || { echo "install.sh: part $name is missing from $FROM" >&2; missing=1; }
done < SHA256SUMS
[ "$missing" = 0 ] || exit 2
grep -v "  $KIT_NAME\$" SHA256SUMS | sha256sum --quiet -c - || { echo "install.sh: a part is damaged (above): copy it again" >&2; exit 2; }
echo "parts verified"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tuner-kit.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cat $(grep -v "  $KIT_NAME\$" SHA256SUMS | awk '{print $2}' | sort) > "$WORK/$KIT_NAME"
(cd "$WORK" && grep "  $KIT_NAME\$" "$FROM/SHA256SUMS" | sha256sum --quiet -c -) \
  || { echo "install.sh: the joined kit does not match its sha256: a part is from another kit" >&2; exit 2; }
echo "kit verified"
xz -dc "$WORK/$KIT_NAME" | tar -x -C "$WORK"
mkdir -p "$TARGET"
# --require-hashes: pip checks every wheel against the manifest before installing it.
"$PY" -m pip install --quiet --no-index --no-deps --require-hashes --find-links "$WORK/wheels" \
  --target "$TARGET" -r "$WORK/manifest.txt"
cp "$WORK/manifest.txt" "$WORK/kit.json" "$TARGET/"
printf '{"engine": "%s", "package": "%s", "version": "%s", "python": "%s", "kit": "%s", "installed": "%s"}\n' \
  "$ENGINE" "$PACKAGE" "$VERSION" "$PY" "$(awk -v k="$KIT_NAME" '$2 == k {print $1}' SHA256SUMS)" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$TARGET/.tuner-engine.json"
echo "installed $PACKAGE $VERSION into $TARGET for $PY"
echo "check it with: tune doctor --space SPACE   (a space whose engine names install: $TARGET)"
