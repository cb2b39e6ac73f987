package file_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
)

// Linux's inode flag ioctls (linux/fs.h) and the immutable flag.
const (
	fsIocGetFlags   = 0x80086601
	fsIocSetFlags   = 0x40086602
	fsImmutableFlag = 0x10
)

// setImmutable sets or clears directory dir's immutable flag (chattr +i):
// nothing can be created in it or removed from it, root included.
func setImmutable(dir string, on bool) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	var flags int
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocGetFlags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return e
	}
	if on {
		flags |= fsImmutableFlag
	} else {
		flags &^= fsImmutableFlag
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocSetFlags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return e
	}
	return nil
}

// cannotRun skips a test this process cannot run (no immutable flag, no
// mount namespace), or fails it under CI=true when the process is root,
// who can do both on an ordinary Linux file system (as s3test and
// slurmtest fail rather than skip there): a CI runner whose tests skipped
// silently would leave STORE_DENIED, EROFS and ENOSPC untested.
func cannotRun(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" && os.Geteuid() == 0 {
		t.Fatalf(format+" (CI=true: not skipping)", args...)
	}
	t.Skipf(format, args...)
}

// denyWrites makes directory dir refuse new entries, the way this process
// can: not writable (EACCES) for a user who is not root, immutable
// (EPERM) for root, whom no mode stops. It returns what it did, and
// undoes it at the test's end.
func denyWrites(t *testing.T, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return "mode 0555"
	}
	if err := setImmutable(dir, true); err != nil {
		cannotRun(t, "root, and the file system of %s takes no immutable flag (%v): no way to deny root a write", dir, err)
	}
	t.Cleanup(func() { setImmutable(dir, false) })
	return "immutable"
}

// A store whose directory refuses this user a write (its mode, an
// immutable flag) is STORE_DENIED, exit 2, as S3's AccessDenied is,
// not IO, exit 3, which scripts and the engines retry in vain; the
// refused Put changes nothing and leaves no temp file.
func TestWriteDenied(t *testing.T) {
	s, dir := openTemp(t)
	ctx := t.Context()
	if _, err := s.Put(ctx, "k", strings.NewReader("v1"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ deny, key string }{
		{"k", "k"},     // a new version: the link
		{".", "new/k"}, // a new key: the mkdir
		{"@tmp", "k2"}, // the temp file
	} {
		how := denyWrites(t, filepath.Join(dir, c.deny))
		_, err := s.Put(ctx, c.key, strings.NewReader("v2"), objstore.PutOptions{})
		if code := errcode.Of(err); code != errcode.StoreDenied || code.Exit() != errcode.ExitUsage {
			t.Fatalf("Put %s into a store whose %s is %s: %v (code %s), want STORE_DENIED, exit %d", c.key, c.deny, how, err, code, errcode.ExitUsage)
		}
		if !errors.Is(err, os.ErrPermission) {
			t.Errorf("the error does not carry its cause: %v", err)
		}
		// link(2)'s EPERM also means a file system without hard links.
		if how == "immutable" && c.deny == "k" && !strings.Contains(err.Error(), "no hard links") {
			t.Errorf("a link refused EPERM does not name a file system without hard links: %v", err)
		}
		if got := readAll(t, s, "k"); got != "v1" {
			t.Fatalf("k after a refused Put: %q", got)
		}
		if tmp, _ := os.ReadDir(filepath.Join(dir, "@tmp")); len(tmp) != 0 {
			t.Fatalf("temp files left: %v", tmp)
		}
		if c.deny != "@tmp" {
			setImmutable(filepath.Join(dir, c.deny), false)
			os.Chmod(filepath.Join(dir, c.deny), 0o755)
		}
	}
}

// readOnlyEnv names the store a child process mounts read-only in a
// mount namespace of its own and writes to (TestReadOnlyFileSystem).
const readOnlyEnv = "SHARDPROOF_TEST_READ_ONLY_STORE"

// A store on a read-only file system (a read-only bind mount) is
// STORE_DENIED for a Put, and still reads.
func TestReadOnlyFileSystem(t *testing.T) {
	if dir := os.Getenv(readOnlyEnv); dir != "" {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			fmt.Printf("setup: bind mount: %v\n", err)
			return
		}
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			fmt.Printf("setup: remount read-only: %v\n", err)
			return
		}
		s, err := file.OpenExisting(dir)
		if err != nil {
			fmt.Printf("open: %v\n", err)
			return
		}
		_, err = s.Put(t.Context(), "k", strings.NewReader("v2"), objstore.PutOptions{})
		fmt.Printf("put: %s: %v\n", errcode.Of(err), errors.Is(err, syscall.EROFS))
		fmt.Printf("read: %s\n", readAll(t, s, "k"))
		return
	}
	s, dir := openTemp(t)
	if _, err := s.Put(t.Context(), "k", strings.NewReader("v1"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestReadOnlyFileSystem$")
	child.Env = append(os.Environ(), readOnlyEnv+"="+dir)
	// A private mount namespace: the mounts end with the child.
	child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := child.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "operation not permitted") {
		cannotRun(t, "no mount namespace for this process: %v", err)
	}
	if strings.Contains(string(out), "setup: ") {
		cannotRun(t, "no read-only bind mount here: %s", out)
	}
	if err != nil || !strings.Contains(string(out), "put: STORE_DENIED: true\n") || !strings.Contains(string(out), "read: v1\n") {
		t.Fatalf("a Put on a read-only file system: %v\n%s\nwant STORE_DENIED carrying EROFS, and k still read", err, out)
	}
	if got := readAll(t, s, "k"); got != "v1" {
		t.Fatalf("k after a refused Put: %q", got)
	}
}

// noSpaceEnv names the directory a child process mounts a small tmpfs on
// and Puts into (TestPutNoSpace).
const noSpaceEnv = "SHARDPROOF_TEST_NO_SPACE_STORE"

// A Put that runs out of space (ENOSPC, a real one: a 256 KiB tmpfs) is
// IO naming the key and the cause, leaves no version and no temp file,
// and the same Put succeeds once there is space (the tmpfs grown).
func TestPutNoSpace(t *testing.T) {
	if dir := os.Getenv(noSpaceEnv); dir != "" {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
			fmt.Printf("setup: mount tmpfs: %v\n", err)
			return
		}
		s, err := file.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Repeat("x", 1<<20)
		_, err = s.Put(t.Context(), "jobs/p/map/0/r0.arrow", strings.NewReader(body), objstore.PutOptions{IfNoneMatch: true})
		fmt.Printf("put: %s: %v: %v\n", errcode.Of(err), errors.Is(err, syscall.ENOSPC), err)
		if _, err := s.Head(t.Context(), "jobs/p/map/0/r0.arrow", ""); !objstore.IsNotExist(err) {
			fmt.Printf("a version is left: %v\n", err)
		}
		if tmp, _ := os.ReadDir(filepath.Join(dir, "@tmp")); len(tmp) != 0 {
			fmt.Printf("temp files left: %v\n", tmp)
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size=4m"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(t.Context(), "jobs/p/map/0/r0.arrow", strings.NewReader(body), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			fmt.Printf("the Put again, with space: %v\n", err)
		}
		if got := readAll(t, s, "jobs/p/map/0/r0.arrow"); got != body {
			fmt.Printf("read back %d bytes\n", len(got))
		}
		return
	}
	dir := t.TempDir()
	child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestPutNoSpace$")
	child.Env = append(os.Environ(), noSpaceEnv+"="+dir)
	child.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := child.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "operation not permitted") {
		cannotRun(t, "no mount namespace for this process: %v", err)
	}
	if strings.Contains(string(out), "setup: ") {
		cannotRun(t, "no tmpfs mount here: %s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != 2 || lines[1] != "PASS" || !strings.HasPrefix(lines[0], "put: IO: true: ") ||
		!strings.Contains(lines[0], "put jobs/p/map/0/r0.arrow") || !strings.Contains(lines[0], "no space left on device") {
		t.Fatalf("a Put with no space left: %v\n%s\nwant IO naming the key, carrying ENOSPC, and nothing left", err, out)
	}
}
