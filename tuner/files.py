"""Reading the files a user hands the tool, and writing the tool's own files atomically.

Every input file (a space, an engine spec, a dataset, a model's config.json, an export archive, a
workload file) can hold anything: Latin-1 or UTF-16 text, a binary blob, a directory name. Reading
them all through ``read_text`` turns each of those into one ``InputError`` that names the file and
what is wrong with it, instead of a ``UnicodeDecodeError`` traceback from deep inside a parser.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from tuner.errors import InputError

_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
         (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def check_readable(path: Path, what: str) -> Path:
    """``path`` if it is a regular file this process may read; otherwise an InputError saying why.

    A FIFO or a device would block or never end, so only regular files pass."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(f"{what} {path}: does not exist") from None
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {path}: is not a regular file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{what} {path}: cannot read: permission denied")
    return path


def read_text(path: Path, what: str) -> str:
    """The file's text, which must be UTF-8 (a UTF-8 byte-order mark is allowed)."""
    path = Path(path)
    check_readable(path, what)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = next((f" (it starts with a {name} byte-order mark: save it as UTF-8)"
                     for bom, name in _BOMS if data.startswith(bom)), "")
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{what} {path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at line "
                         f"{line} (byte offset {exc.start}){hint}") from None


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write through a temporary file in the same folder, then rename: a reader (a browser
    reloading a report, a concurrent `tune resume`, a CI upload) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists: where creating ``path`` would start, and the
    file in the way when it is not a folder."""
    path = path.absolute()
    return next(p for p in (path, *path.parents) if p.exists())


def check_output_path(path: Path, what: str) -> Path:
    """``path`` unless it is a folder or lies under a file: an InputError naming it, before any
    work is done for it."""
    if path.is_dir():
        raise InputError(f"{what} {path}: is a directory; name a file")
    above = nearest_existing(path.parent)
    if not above.is_dir():
        raise InputError(f"{what} {path}: {above} is a file, not a folder")
    return path


def write_output(path: Path, data: str | bytes, what: str) -> Path:
    """``write_atomic`` for a file the user named (``what``: its flag or role): a path that cannot
    be written (a folder, a file where a folder should be, no permission) is an InputError naming
    it, and nothing is left in its place."""
    path = check_output_path(Path(path), what)
    try:
        return write_atomic(path, data)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None
