#!/usr/bin/env python3
"""unpack-debs.py ROOT DEB...: unpacks each Debian package's files into ROOT (never into /), reading the ar archive
and its data.tar (xz, zstd where Python has it, gz or none) with Python alone: a machine without dpkg can use it."""
import io
import os
import sys
import tarfile


def members(path):
    """The members of an ar archive: (name, bytes)."""
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise SystemExit(f"{path}: not a Debian package")
        while header := f.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
            yield name, f.read(size)
            f.read(size % 2)


def unpack(path, root):
    for name, data in members(path):
        if not name.startswith("data.tar"):
            continue
        if name.endswith(".zst"):
            import zstandard  # noqa: only for packages compressed with zstd
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        checked = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}  # Pythons that filter members
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                target = os.path.realpath(os.path.join(root, member.name))
                if not target.startswith(os.path.realpath(root) + os.sep) and target != os.path.realpath(root):
                    raise SystemExit(f"{path}: {member.name} would land outside {root}")
                if member.issym() and os.path.isabs(member.linkname):
                    continue  # a link to the system's files (Debian's alternatives): nothing the build reads
                tar.extract(member, root, **checked)
        return
    raise SystemExit(f"{path}: no data.tar member")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    root = os.path.abspath(sys.argv[1])
    if root == "/":
        raise SystemExit("unpack-debs: not into /")
    os.makedirs(root, exist_ok=True)
    for deb in sys.argv[2:]:
        unpack(deb, root)
    print(f"unpack-debs: {len(sys.argv) - 2} packages into {root}")


if __name__ == "__main__":
    main()
