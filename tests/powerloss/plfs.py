"""plfs: a FUSE file system that loses, at a simulated power loss, everything that was not made durable.

    python plfs.py BACKING MOUNTPOINT [--ignore-fsync SUFFIX]... [--ignore-dirsync]

Model (POSIX's promise, and no more; what lazyfs and ALICE call the strict model):

* file data and size become durable at fsync/fdatasync of that file (msync of a shared mapping arrives as one);
* a directory entry (create, mkdir, rename, unlink, rmdir) becomes durable at an fsync of its directory; a file whose
  entry never became durable is gone after a power loss even if its data was fsynced, an unlink or rename not
  covered by a directory fsync is undone;
* everything else lives only in this process's memory (the "page cache"). Killing this process is the power loss:
  the kernel drops the mount and its page cache with it. Mounting BACKING again shows the durable state only.

BACKING holds the durable state: ``meta.json`` (directory tables by inode, file kinds) and ``data/<inode>`` (file
contents as last fsynced), each replaced atomically. Files are kept whole in memory: this is for tests (small logs).

``--ignore-fsync SUFFIX`` turns fsync of files whose name ends with SUFFIX into a no-op, ``--ignore-dirsync`` does the
same for directory fsyncs: deliberate breakages that the power-loss tests must catch.

flock is not implemented here, so the kernel keeps flock locks itself (correct across the processes of one machine).
Open files stay readable and writable after an unlink (hard_remove + nullpath_ok: operations come by handle).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import threading
import time

import mfusepy as fuse

ROOT = 1


class Node:
    __slots__ = ("ino", "is_dir", "data", "entries", "mode", "mtime", "parent_refs")

    def __init__(self, ino: int, is_dir: bool, mode: int):
        self.ino = ino
        self.is_dir = is_dir
        self.data = None if is_dir else bytearray()
        self.entries: dict[str, int] | None = {} if is_dir else None
        self.mode = mode
        self.mtime = time.time()


class PowerLossFS(fuse.Operations):
    use_ns = True
    flag_nopath = False
    flag_nullpath_ok = True  # with hard_remove: an unlinked file stays usable through its open handles

    def __init__(self, backing: str, ignore_fsync=(), ignore_dirsync=False):
        self.backing = os.path.abspath(backing)
        self.ignore_fsync = tuple(ignore_fsync)
        self.ignore_dirsync = ignore_dirsync
        self._mu = threading.RLock()
        os.makedirs(os.path.join(backing, "data"), exist_ok=True)
        self.nodes: dict[int, Node] = {}
        self.fhs: dict[int, int] = {}  # file handle -> inode
        self.next_fh = 1
        self._load()

    # ------------------------------------------------------------------------------------------------ durable state

    def _meta_path(self):
        return os.path.join(self.backing, "meta.json")

    def _load(self):
        try:
            with open(self._meta_path()) as f:
                meta = json.load(f)
        except FileNotFoundError:
            meta = {"next_ino": 2, "dirs": {str(ROOT): {}}, "kinds": {str(ROOT): "dir"}, "modes": {}}
        self.d_dirs = {int(k): dict(v) for k, v in meta["dirs"].items()}
        self.d_kinds = {int(k): v for k, v in meta["kinds"].items()}
        self.d_modes = {int(k): v for k, v in meta.get("modes", {}).items()}
        self.next_ino = meta["next_ino"]

        def build(ino: int, is_dir: bool):
            node = Node(ino, is_dir, self.d_modes.get(ino, 0o755 if is_dir else 0o644))
            self.nodes[ino] = node
            if is_dir:
                for name, child in self.d_dirs.get(ino, {}).items():
                    if child in self.nodes:
                        continue  # no hard links here: a second entry is stale
                    node.entries[name] = child
                    build(child, self.d_kinds.get(child) == "dir")
            else:
                try:
                    with open(os.path.join(self.backing, "data", str(ino)), "rb") as f:
                        node.data = bytearray(f.read())
                except FileNotFoundError:
                    node.data = bytearray()  # the entry was made durable, the data never was

        build(ROOT, True)
        # A file fsynced before its directory entry became durable left its data behind (data/<inode>) with an
        # inode number above the durable next_ino: a new file must never get that number, or a directory fsync
        # that makes the new file's entry durable before its own fsync would show the orphan's old bytes in it
        # (a real file system shows a never-fsynced file empty). Orphans' data go.
        data_dir = os.path.join(self.backing, "data")
        for name in os.listdir(data_dir):
            if name.isdigit():
                self.next_ino = max(self.next_ino, int(name) + 1)
                if int(name) not in self.nodes:
                    os.unlink(os.path.join(data_dir, name))

    def _save_meta(self):
        meta = {"next_ino": self.next_ino, "dirs": {str(k): v for k, v in self.d_dirs.items()},
                "kinds": {str(k): v for k, v in self.d_kinds.items()},
                "modes": {str(k): v for k, v in self.d_modes.items()}}
        tmp = self._meta_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, self._meta_path())

    def _persist_file(self, node: Node):
        path = os.path.join(self.backing, "data", str(node.ino))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(node.data)
        os.replace(tmp, path)

    def _persist_dir(self, node: Node):
        self.d_dirs[node.ino] = dict(node.entries)
        for child in node.entries.values():
            c = self.nodes[child]
            self.d_kinds[child] = "dir" if c.is_dir else "file"
            self.d_modes[child] = c.mode
            if c.is_dir:
                self.d_dirs.setdefault(child, {})
        self._save_meta()

    # ------------------------------------------------------------------------------------------------ lookup

    def _lookup(self, path: str) -> Node:
        node = self.nodes[ROOT]
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir or part not in node.entries:
                raise fuse.FuseOSError(errno.ENOENT)
            node = self.nodes[node.entries[part]]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, name = os.path.split(path.rstrip("/"))
        parent = self._lookup(head or "/")
        if not parent.is_dir:
            raise fuse.FuseOSError(errno.ENOTDIR)
        return parent, name

    def _node(self, path, fh) -> Node:
        if fh is not None and fh in self.fhs:
            return self.nodes[self.fhs[fh]]
        if path is None:
            raise fuse.FuseOSError(errno.EBADF)
        return self._lookup(path)

    def _new_fh(self, ino: int) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.fhs[fh] = ino
        return fh

    # ------------------------------------------------------------------------------------------------ operations

    def getattr(self, path, fh=None):
        with self._mu:
            node = self._node(path, fh)
            ns = int(node.mtime * 1e9)
            if node.is_dir:
                return {"st_mode": stat.S_IFDIR | node.mode, "st_nlink": 2, "st_size": 4096, "st_ino": node.ino,
                        "st_mtime": ns, "st_atime": ns, "st_ctime": ns, "st_uid": os.getuid(), "st_gid": os.getgid()}
            size = len(node.data)
            return {"st_mode": stat.S_IFREG | node.mode, "st_nlink": 1, "st_size": size, "st_ino": node.ino,
                    "st_blocks": (size + 511) // 512, "st_mtime": ns, "st_atime": ns, "st_ctime": ns,
                    "st_uid": os.getuid(), "st_gid": os.getgid()}

    def readdir(self, path, fh):
        with self._mu:
            node = self._lookup(path)
            # with use_ino every entry needs its inode: readdir(3) skips entries whose d_ino is 0
            out = [(".", {"st_ino": node.ino, "st_mode": stat.S_IFDIR}, 0),
                   ("..", {"st_ino": ROOT, "st_mode": stat.S_IFDIR}, 0)]
            for name, ino in node.entries.items():
                kind = stat.S_IFDIR if self.nodes[ino].is_dir else stat.S_IFREG
                out.append((name, {"st_ino": ino, "st_mode": kind}, 0))
            return out

    def access(self, path, amode):
        return 0

    def chmod(self, path, mode):
        with self._mu:
            self._lookup(path).mode = mode & 0o7777
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        with self._mu:
            if path is not None:
                self._lookup(path).mtime = time.time()
        return 0

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 24, "f_bfree": 1 << 23, "f_bavail": 1 << 23,
                "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}

    def mkdir(self, path, mode):
        with self._mu:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise fuse.FuseOSError(errno.EEXIST)
            node = Node(self.next_ino, True, mode & 0o7777)
            self.next_ino += 1
            self.nodes[node.ino] = node
            parent.entries[name] = node.ino
        return 0

    def rmdir(self, path):
        with self._mu:
            parent, name = self._parent(path)
            node = self._lookup(path)
            if not node.is_dir:
                raise fuse.FuseOSError(errno.ENOTDIR)
            if node.entries:
                raise fuse.FuseOSError(errno.ENOTEMPTY)
            del parent.entries[name]
        return 0

    def create(self, path, mode, fi=None):
        with self._mu:
            parent, name = self._parent(path)
            if name in parent.entries:
                node = self.nodes[parent.entries[name]]
            else:
                node = Node(self.next_ino, False, mode & 0o7777)
                self.next_ino += 1
                self.nodes[node.ino] = node
                parent.entries[name] = node.ino
            return self._new_fh(node.ino)

    def open(self, path, flags):
        with self._mu:
            node = self._lookup(path)
            return self._new_fh(node.ino)

    def opendir(self, path):
        return 0

    def release(self, path, fh):
        with self._mu:
            self.fhs.pop(fh, None)
        return 0

    def flush(self, path, fh):
        return 0

    def read(self, path, size, offset, fh):
        with self._mu:
            node = self._node(path, fh)
            return bytes(node.data[offset:offset + size])

    def write(self, path, data, offset, fh):
        with self._mu:
            node = self._node(path, fh)
            end = offset + len(data)
            if end > len(node.data):
                node.data.extend(bytes(end - len(node.data)))
            node.data[offset:end] = data
            node.mtime = time.time()
            return len(data)

    def truncate(self, path, length, fh=None):
        with self._mu:
            node = self._node(path, fh)
            if length < len(node.data):
                del node.data[length:]
            else:
                node.data.extend(bytes(length - len(node.data)))
            node.mtime = time.time()
        return 0

    def fallocate(self, path, mode, offset, size, fh):
        with self._mu:
            node = self._node(path, fh)
            if mode == 0 and offset + size > len(node.data):
                node.data.extend(bytes(offset + size - len(node.data)))
        return 0

    def unlink(self, path):
        with self._mu:
            parent, name = self._parent(path)
            if name not in parent.entries:
                raise fuse.FuseOSError(errno.ENOENT)
            del parent.entries[name]  # open handles keep the node (self.nodes) until the next mount
        return 0

    def rename(self, old, new):
        with self._mu:
            op, oname = self._parent(old)
            np_, nname = self._parent(new)
            if oname not in op.entries:
                raise fuse.FuseOSError(errno.ENOENT)
            ino = op.entries[oname]
            if nname in np_.entries and self.nodes[np_.entries[nname]].is_dir:
                if self.nodes[np_.entries[nname]].entries:
                    raise fuse.FuseOSError(errno.ENOTEMPTY)
            del op.entries[oname]
            np_.entries[nname] = ino
        return 0

    def fsync(self, path, datasync, fh):
        with self._mu:
            node = self._node(path, fh)
            if node.is_dir:
                return self._fsyncdir(node)
            if path is not None and path.endswith(self.ignore_fsync) and self.ignore_fsync:
                return 0
            self._persist_file(node)
        return 0

    def fsyncdir(self, path, datasync, fh):
        with self._mu:
            return self._fsyncdir(self._lookup(path))

    def _fsyncdir(self, node: Node) -> int:
        if not self.ignore_dirsync:
            self._persist_dir(node)
        return 0


def main(argv) -> int:
    args = list(argv)
    ignore, ignore_dirsync = [], False
    while "--ignore-fsync" in args:
        i = args.index("--ignore-fsync")
        ignore.append(args[i + 1])
        del args[i:i + 2]
    if "--ignore-dirsync" in args:
        args.remove("--ignore-dirsync")
        ignore_dirsync = True
    backing, mountpoint = args
    fs = PowerLossFS(backing, ignore, ignore_dirsync)
    fuse.FUSE(fs, mountpoint, foreground=True, nothreads=False, allow_other=False, default_permissions=False,
              fsname="plfs", hard_remove=True, use_ino=True, attr_timeout=0, entry_timeout=0, negative_timeout=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
