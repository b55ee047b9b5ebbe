// lazyfs: a FUSE file system over a backing directory that keeps every write the
// application has not made durable in memory, and can "pull the plug": drop it all, so
// that the backing directory holds exactly what a disk would after a power loss (the
// idea of LazyFS, https://github.com/dsrhaslab/lazyfs, with a strict POSIX model of
// directory entries). Used by the nemesis (test/nemesis/power.ts); see its README.
//
//	lazyfs --backing DIR --mount DIR --control SOCKET [--mode strict|ext4]
//
// The model. The backing directory always holds the durable state, and nothing else:
//
//   - File data: a write goes to the file's pending extents in memory (reads see them,
//     as they see the page cache). fsync or fdatasync of the file writes them, and the
//     file's size, to the file's staging file, <backing>/.lazyfs-staging/<id>.
//   - Directory entries (strict mode): a create, rename or unlink changes the directory as
//     the application sees it (in memory) and nothing on the backing directory. fsync of
//     the directory makes its entries durable: each durable name of a file is a hard link
//     <backing>/<dir>/<name> to the file's staging file, so it carries the file's durable
//     data, whatever that is. fsync of a file does not make its name durable.
//   - ext4 mode: fsync of anything commits every directory's entries too (ext4's journal
//     commits all metadata operations so far with any fsync); data stays per file.
//   - Directories themselves (mkdir, rmdir) are made durable at once: a simplification,
//     LevelDB creates none inside its database directory.
//
// Pulling the plug (the control socket's `crash`) drops the pending data, deletes the
// staging directory (the files with no durable name go with it, as a power loss frees
// orphaned inodes), unmounts and exits: the backing directory is then the disk after the
// power loss, and a new lazyfs on it is the machine booting again.
//
// Control socket: one command a line, one JSON line back: `stats` (pending bytes, syncs,
// …), `crash` (the stats of what was dropped, then the process unmounts and exits),
// `full` (the disk is full from now on: writes, new files and new directories fail with
// ENOSPC and statfs reports no free blocks) and `room` (it has room again).
// SIGTERM or SIGINT unmounts and exits without dropping anything unsynced (as a clean
// shutdown would sync it, everything pending is flushed first).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

const stagingName = ".lazyfs-staging"

// renameNoreplace is RENAME_NOREPLACE (linux/fs.h).
const renameNoreplace = 1

type extent struct {
	off  int64
	data []byte
}

type stats struct {
	PendingBytes     int64  `json:"pendingBytes"`
	PendingFiles     int    `json:"pendingFiles"`
	UncommittedNames int    `json:"uncommittedNames"`
	Files            int    `json:"files"`
	Writes           int64  `json:"writes"`
	WrittenBytes     int64  `json:"writtenBytes"`
	Fsyncs           int64  `json:"fsyncs"`
	Fdatasyncs       int64  `json:"fdatasyncs"`
	DirFsyncs        int64  `json:"dirFsyncs"`
	SyncedBytes      int64  `json:"syncedBytes"`
	Mode             string `json:"mode"`
	Full             bool   `json:"full"`
}

type lazyFS struct {
	mu      sync.Mutex
	backing string
	staging string
	ext4    bool
	crashed bool
	// A full disk (the control's "full", until "room"): writes and new files and
	// directories fail with ENOSPC, and statfs reports no free space.
	full   bool
	nextID uint64
	files  map[uint64]*fileNode
	dirs   []*dirNode
	st     stats
}

// ---- files -----------------------------------------------------------------------------

type fileNode struct {
	fs.Inode
	lfs *lazyFS
	id  uint64
	// The application's view: size, mode, times.
	size  int64
	mode  uint32
	mtime time.Time
	// The staging file's size (the durable size), and how much of it is still the file's
	// content (a truncation since the last sync makes the rest stale).
	stagingSize int64
	validTo     int64
	pending     []extent // sorted, disjoint
	// References: a name in the application's view, durable names, open handles.
	linked      bool
	durableRefs int
	opens       int
}

type handle struct{}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
	_ fs.NodeReleaser  = (*fileNode)(nil)
)

func (f *fileNode) stagingPath() string {
	return filepath.Join(f.lfs.staging, fmt.Sprint(f.id))
}

func (f *fileNode) pendingBytes() int64 {
	var n int64
	for _, e := range f.pending {
		n += int64(len(e.data))
	}
	return n
}

func (f *fileNode) dirty() bool {
	return len(f.pending) > 0 || f.size != f.stagingSize || f.validTo != f.stagingSize
}

func (f *fileNode) fill(out *fuse.Attr) {
	out.Size = uint64(f.size)
	out.Blocks = (uint64(f.size) + 511) / 512
	out.Mode = syscall.S_IFREG | (f.mode & 07777)
	out.Nlink = 1
	out.SetTimes(nil, &f.mtime, &f.mtime)
}

func (f *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	f.fill(&out.Attr)
	return 0
}

func (f *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	l := f.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return syscall.EIO
	}
	if sz, ok := in.GetSize(); ok {
		f.truncate(int64(sz))
	}
	if m, ok := in.GetMode(); ok {
		f.mode = m & 07777
	}
	if mt, ok := in.GetMTime(); ok {
		f.mtime = mt
	}
	f.fill(&out.Attr)
	return 0
}

func (f *fileNode) truncate(size int64) {
	if size < f.size {
		kept := f.pending[:0]
		for _, e := range f.pending {
			if e.off >= size {
				continue
			}
			if e.off+int64(len(e.data)) > size {
				e.data = e.data[:size-e.off]
			}
			kept = append(kept, e)
		}
		f.pending = kept
		if size < f.validTo {
			f.validTo = size
		}
	}
	f.size = size
	f.mtime = time.Now()
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	l := f.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return nil, 0, syscall.EIO
	}
	if flags&syscall.O_TRUNC != 0 {
		f.truncate(0)
	}
	f.opens++
	return &handle{}, 0, 0
}

func (f *fileNode) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	l := f.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	f.opens--
	l.collect(f)
	return 0
}

func (f *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	l := f.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return nil, syscall.EIO
	}
	if off >= f.size {
		return fuse.ReadResultData(nil), 0
	}
	n := int64(len(dest))
	if off+n > f.size {
		n = f.size - off
	}
	buf := dest[:n]
	for i := range buf {
		buf[i] = 0
	}
	valid := f.validTo
	if f.stagingSize < valid {
		valid = f.stagingSize
	}
	if off < valid {
		end := n
		if off+end > valid {
			end = valid - off
		}
		file, err := os.Open(f.stagingPath())
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		_, err = file.ReadAt(buf[:end], off)
		file.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fs.ToErrno(err)
		}
	}
	for _, e := range f.pending {
		s, t := e.off, e.off+int64(len(e.data))
		if t <= off || s >= off+n {
			continue
		}
		lo, hi := max64(s, off), min64(t, off+n)
		copy(buf[lo-off:hi-off], e.data[lo-s:hi-s])
	}
	return fuse.ReadResultData(buf), 0
}

func (f *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	l := f.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return 0, syscall.EIO
	}
	if l.full {
		return 0, syscall.ENOSPC
	}
	f.write(off, data)
	l.st.Writes++
	l.st.WrittenBytes += int64(len(data))
	return uint32(len(data)), 0
}

// write records data at off as pending, over whatever was pending there.
func (f *fileNode) write(off int64, data []byte) {
	end := off + int64(len(data))
	out := make([]extent, 0, len(f.pending)+1)
	for _, e := range f.pending {
		s, t := e.off, e.off+int64(len(e.data))
		if t <= off || s >= end {
			out = append(out, e)
			continue
		}
		if s < off {
			// Capacity cut too, so that growing this piece never writes over the rest.
			out = append(out, extent{s, e.data[: off-s : off-s]})
		}
		if t > end {
			out = append(out, extent{end, e.data[end-s:]})
		}
	}
	i := sort.Search(len(out), func(i int) bool { return out[i].off >= off })
	if i > 0 && out[i-1].off+int64(len(out[i-1].data)) == off {
		// An append to the extent before (the common case: a log): grow it.
		out[i-1].data = append(out[i-1].data, data...)
	} else {
		out = append(out, extent{})
		copy(out[i+1:], out[i:])
		out[i] = extent{off, append([]byte(nil), data...)}
	}
	f.pending = out
	if end > f.size {
		f.size = end
	}
	f.mtime = time.Now()
}

// sync writes the pending data and the size to the staging file (the durable data).
func (f *fileNode) sync() syscall.Errno {
	l := f.lfs
	if !f.dirty() {
		return 0
	}
	file, err := os.OpenFile(f.stagingPath(), os.O_WRONLY, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer file.Close()
	if f.validTo < f.stagingSize {
		if err := file.Truncate(f.validTo); err != nil {
			return fs.ToErrno(err)
		}
	}
	for _, e := range f.pending {
		if _, err := file.WriteAt(e.data, e.off); err != nil {
			return fs.ToErrno(err)
		}
		l.st.SyncedBytes += int64(len(e.data))
	}
	if err := file.Truncate(f.size); err != nil {
		return fs.ToErrno(err)
	}
	f.pending = nil
	f.stagingSize, f.validTo = f.size, f.size
	return 0
}

func (f *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	l := f.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return syscall.EIO
	}
	if flags&1 != 0 {
		l.st.Fdatasyncs++
	} else {
		l.st.Fsyncs++
	}
	if errno := f.sync(); errno != 0 {
		return errno
	}
	if l.ext4 {
		return l.commitAll()
	}
	return 0
}

// ---- directories -----------------------------------------------------------------------

type dirNode struct {
	fs.Inode
	lfs *lazyFS
	rel string // path in the backing directory; directories are never renamed
	ino uint64
	// The durable entries: what the backing directory holds (a hard link each).
	durable map[string]*fileNode
	mtime   time.Time
}

var (
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeFsyncer   = (*dirNode)(nil)
	_ fs.NodeStatfser  = (*dirNode)(nil)
)

func (d *dirNode) dir() *dirNode { return d }

func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0755
	out.Nlink = 2
	out.SetTimes(nil, &d.mtime, &d.mtime)
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(d.lfs.backing, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	d.lfs.mu.Lock()
	if d.lfs.full {
		out.Bfree, out.Bavail = 0, 0
	}
	d.lfs.mu.Unlock()
	return 0
}

func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	l := d.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return nil, nil, 0, syscall.EIO
	}
	if name == stagingName && d.rel == "" {
		return nil, nil, 0, syscall.EPERM
	}
	if ch := d.GetChild(name); ch != nil {
		f, ok := ch.Operations().(*fileNode)
		if !ok || flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
		if flags&syscall.O_TRUNC != 0 {
			f.truncate(0)
		}
		f.opens++
		f.fill(&out.Attr)
		return ch, &handle{}, 0, 0
	}
	if l.full {
		return nil, nil, 0, syscall.ENOSPC
	}
	f, errno := l.newFile(mode&07777, 0)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	f.linked = true
	f.opens++
	d.mtime = time.Now()
	ch := d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: f.id})
	f.fill(&out.Attr)
	return ch, &handle{}, 0, 0
}

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	l := d.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return syscall.EIO
	}
	ch := d.GetChild(name)
	if ch == nil {
		return syscall.ENOENT
	}
	f, ok := ch.Operations().(*fileNode)
	if !ok {
		return syscall.EISDIR
	}
	f.linked = false
	d.mtime = time.Now()
	// go-fuse takes the name out of the tree once this returns; the file lives on while
	// a durable name or an open handle refers to it.
	l.collect(f)
	return 0
}

func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	l := d.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return syscall.EIO
	}
	np, ok := newParent.(interface{ dir() *dirNode })
	if !ok {
		return syscall.EINVAL
	}
	nd := np.dir()
	ch := d.GetChild(name)
	if ch == nil {
		return syscall.ENOENT
	}
	if _, ok := ch.Operations().(*fileNode); !ok {
		return syscall.ENOTSUP // directories are never renamed (see the package comment)
	}
	if flags&fs.RENAME_EXCHANGE != 0 {
		return syscall.ENOTSUP
	}
	if old := nd.GetChild(newName); old != nil {
		if flags&renameNoreplace != 0 {
			return syscall.EEXIST
		}
		of, ok := old.Operations().(*fileNode)
		if !ok {
			return syscall.EISDIR
		}
		if of != ch.Operations().(*fileNode) {
			of.linked = false
			l.collect(of)
		}
	}
	d.mtime, nd.mtime = time.Now(), time.Now()
	return 0
}

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	l := d.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return nil, syscall.EIO
	}
	if name == stagingName && d.rel == "" {
		return nil, syscall.EPERM
	}
	if l.full {
		return nil, syscall.ENOSPC
	}
	rel := filepath.Join(d.rel, name)
	if err := os.Mkdir(filepath.Join(l.backing, rel), 0755); err != nil {
		return nil, fs.ToErrno(err)
	}
	nd := l.newDir(rel)
	out.Mode = syscall.S_IFDIR | 0755
	return d.NewPersistentInode(ctx, nd, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: nd.ino}), 0
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	l := d.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return syscall.EIO
	}
	ch := d.GetChild(name)
	if ch == nil {
		return syscall.ENOENT
	}
	nd, ok := ch.Operations().(*dirNode)
	if !ok {
		return syscall.ENOTDIR
	}
	if len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	// Durable at once, like mkdir: its durable entries go with it.
	for n, f := range nd.durable {
		f.durableRefs--
		delete(nd.durable, n)
		l.collect(f)
	}
	if err := os.RemoveAll(filepath.Join(l.backing, nd.rel)); err != nil {
		return fs.ToErrno(err)
	}
	for i, x := range l.dirs {
		if x == nd {
			l.dirs = append(l.dirs[:i], l.dirs[i+1:]...)
			break
		}
	}
	return 0
}

func (d *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	l := d.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return syscall.EIO
	}
	l.st.DirFsyncs++
	if l.ext4 {
		return l.commitAll()
	}
	return d.commit()
}

// current is the directory's entries as the application sees them (files only).
func (d *dirNode) current() map[string]*fileNode {
	m := map[string]*fileNode{}
	for name, ch := range d.Children() {
		if f, ok := ch.Operations().(*fileNode); ok {
			m[name] = f
		}
	}
	return m
}

// commit makes the directory's entries durable: the backing directory gets exactly them.
func (d *dirNode) commit() syscall.Errno {
	l := d.lfs
	cur := d.current()
	for name, f := range d.durable {
		if cur[name] == f {
			continue
		}
		if err := os.Remove(filepath.Join(l.backing, d.rel, name)); err != nil && !os.IsNotExist(err) {
			return fs.ToErrno(err)
		}
		delete(d.durable, name)
		f.durableRefs--
		l.collect(f)
	}
	for name, f := range cur {
		if d.durable[name] == f {
			continue
		}
		if err := os.Link(f.stagingPath(), filepath.Join(l.backing, d.rel, name)); err != nil {
			return fs.ToErrno(err)
		}
		d.durable[name] = f
		f.durableRefs++
	}
	return 0
}

func (d *dirNode) uncommitted() int {
	n := 0
	cur := d.current()
	for name, f := range d.durable {
		if cur[name] != f {
			n++
		}
	}
	for name, f := range cur {
		if d.durable[name] != f {
			n++
		}
	}
	return n
}

// ---- the file system -------------------------------------------------------------------

func (l *lazyFS) newFile(mode uint32, size int64) (*fileNode, syscall.Errno) {
	l.nextID++
	f := &fileNode{lfs: l, id: l.nextID, mode: mode, mtime: time.Now(), size: size, stagingSize: size, validTo: size}
	file, err := os.OpenFile(f.stagingPath(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0644)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	file.Close()
	l.files[f.id] = f
	return f, 0
}

func (l *lazyFS) newDir(rel string) *dirNode {
	l.nextID++
	d := &dirNode{lfs: l, rel: rel, ino: l.nextID, durable: map[string]*fileNode{}, mtime: time.Now()}
	l.dirs = append(l.dirs, d)
	return d
}

// collect forgets a file no name, durable name or handle refers to any more.
func (l *lazyFS) collect(f *fileNode) {
	if f.linked || f.durableRefs > 0 || f.opens > 0 || l.files[f.id] != f {
		return
	}
	delete(l.files, f.id)
	f.pending = nil
	if !l.crashed {
		os.Remove(f.stagingPath())
	}
}

func (l *lazyFS) commitAll() syscall.Errno {
	for _, d := range l.dirs {
		if errno := d.commit(); errno != 0 {
			return errno
		}
	}
	return 0
}

func (l *lazyFS) stats() stats {
	s := l.st
	s.Files = len(l.files)
	for _, f := range l.files {
		if f.dirty() {
			s.PendingFiles++
			s.PendingBytes += f.pendingBytes()
		}
	}
	for _, d := range l.dirs {
		s.UncommittedNames += d.uncommitted()
	}
	s.Full = l.full
	return s
}

// load builds the tree from the backing directory: every file there is durable, under
// its name and with its content. Staging files left from before are orphans: gone.
func (l *lazyFS) load(ctx context.Context, root *dirNode) error {
	if err := os.RemoveAll(l.staging); err != nil {
		return err
	}
	if err := os.Mkdir(l.staging, 0755); err != nil {
		return err
	}
	var walk func(d *dirNode) error
	walk = func(d *dirNode) error {
		entries, err := os.ReadDir(filepath.Join(l.backing, d.rel))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if d.rel == "" && e.Name() == stagingName {
				continue
			}
			path := filepath.Join(l.backing, d.rel, e.Name())
			info, err := os.Lstat(path)
			if err != nil {
				return err
			}
			switch {
			case info.IsDir():
				nd := l.newDir(filepath.Join(d.rel, e.Name()))
				d.AddChild(e.Name(), d.NewPersistentInode(ctx, nd, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: nd.ino}), false)
				if err := walk(nd); err != nil {
					return err
				}
			case info.Mode().IsRegular():
				l.nextID++
				f := &fileNode{lfs: l, id: l.nextID, mode: uint32(info.Mode().Perm()), mtime: info.ModTime(),
					size: info.Size(), stagingSize: info.Size(), validTo: info.Size(), linked: true, durableRefs: 1}
				if err := os.Link(path, f.stagingPath()); err != nil {
					return err
				}
				l.files[f.id] = f
				d.durable[e.Name()] = f
				d.AddChild(e.Name(), d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: f.id}), false)
			default:
				return fmt.Errorf("%s: only files and directories are supported", path)
			}
		}
		return nil
	}
	return walk(root)
}

type rootNode struct{ dirNode }

func (r *rootNode) OnAdd(ctx context.Context) {
	if err := r.lfs.load(ctx, &r.dirNode); err != nil {
		fmt.Fprintln(os.Stderr, "lazyfs: loading the backing directory:", err)
		os.Exit(1)
	}
}

func main() {
	backing := flag.String("backing", "", "the backing directory (the disk)")
	mount := flag.String("mount", "", "where to mount")
	control := flag.String("control", "", "the control socket's path")
	mode := flag.String("mode", "strict", "strict (POSIX: a directory entry is durable once its directory is fsynced) or ext4 (any fsync commits every entry)")
	debug := flag.Bool("debug", false, "log every FUSE request")
	flag.Parse()
	if *backing == "" || *mount == "" || *control == "" || (*mode != "strict" && *mode != "ext4") {
		flag.Usage()
		os.Exit(2)
	}
	abs, err := filepath.Abs(*backing)
	if err != nil {
		fail(err)
	}
	l := &lazyFS{backing: abs, staging: filepath.Join(abs, stagingName), ext4: *mode == "ext4", files: map[uint64]*fileNode{}}
	l.st.Mode = *mode
	root := &rootNode{dirNode{lfs: l, rel: "", durable: map[string]*fileNode{}, mtime: time.Now()}}
	l.dirs = append(l.dirs, &root.dirNode)
	zero := time.Duration(0)
	server, err := fs.Mount(*mount, root, &fs.Options{
		// No kernel caching of names or attributes: every lookup sees the current view.
		EntryTimeout: &zero,
		AttrTimeout:  &zero,
		MountOptions: fuse.MountOptions{
			DirectMount:   true,
			FsName:        "lazyfs:" + abs,
			Name:          "lazyfs",
			AllowOther:    true,
			Debug:         *debug,
			DisableXAttrs: true,
			// No EnableWritebackCache: writes reach lazyfs as the application makes them.
			// No EnableLocks: the kernel keeps fcntl locks (LevelDB's LOCK) itself.
		},
	})
	if err != nil {
		fail(err)
	}
	os.Remove(*control)
	ln, err := net.Listen("unix", *control)
	if err != nil {
		server.Unmount()
		fail(err)
	}
	var once sync.Once
	stop := func(crash bool) {
		once.Do(func() {
			l.mu.Lock()
			if crash {
				l.crashed = true
				for _, f := range l.files {
					f.pending = nil
				}
				os.RemoveAll(l.staging)
			} else {
				for _, f := range l.files {
					f.sync()
				}
				l.commitAll()
				l.crashed = true
				os.RemoveAll(l.staging)
			}
			l.mu.Unlock()
			ln.Close()
			os.Remove(*control)
			// Detached, so copies of the mount in other mount namespaces (ip netns exec
			// makes one per process) do not hold it; exiting closes /dev/fuse, which
			// ends the connection for every copy.
			if err := syscall.Unmount(*mount, syscall.MNT_DETACH); err != nil {
				fmt.Fprintln(os.Stderr, "lazyfs: unmount:", err)
			}
			os.Exit(0)
		})
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		stop(false)
	}()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveControl(l, conn, stop)
		}
	}()
	fmt.Println("ready")
	server.Wait()
}

func serveControl(l *lazyFS, conn net.Conn, stop func(bool)) {
	defer conn.Close()
	r := bufio.NewScanner(conn)
	for r.Scan() {
		l.mu.Lock()
		s := l.stats()
		l.mu.Unlock()
		line, _ := json.Marshal(s)
		switch r.Text() {
		case "stats":
			conn.Write(append(line, '\n'))
		case "crash":
			conn.Write(append(line, '\n'))
			stop(true)
		case "full", "room":
			l.mu.Lock()
			l.full = r.Text() == "full"
			s = l.stats()
			l.mu.Unlock()
			line, _ = json.Marshal(s)
			conn.Write(append(line, '\n'))
		default:
			conn.Write([]byte(`{"error":"unknown command"}` + "\n"))
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lazyfs:", err)
	os.Exit(1)
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
