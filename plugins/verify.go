package plugins

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Plugin verification. A plugin is an executable the host runs with its own
// rights, so before running one (and before listing one: listing does not
// execute refused files) the host checks:
//
//   - the plugin directory is a directory that neither group nor others may
//     write, owned by root or by the user running attnrun;
//   - the file is a regular file, or a symlink to a regular file inside the
//     plugin directory (whose directory passes the same checks);
//   - the file is executable, neither group- nor other-writable, owned by
//     root or by the user running attnrun, and neither setuid nor setgid;
//   - when a lock file is in effect (LockFileName in the plugin directory,
//     or one named explicitly), the file's SHA-256 is the one pinned there.
//
// The lock file has sha256sum's format, one plugin a line:
//
//	<64 hex digits>  attnrun-backend-gpu
//
// so `sha256sum attnrun-backend-* > attnrun-plugins.lock` in the plugin
// directory writes one, and `sha256sum -c` checks it. With a lock file in
// effect, a plugin it does not list is refused. The lock file must pass the
// file checks above too (bar the executable bit).
//
// At launch the file is opened once, checked and (when pinned) hashed
// through that descriptor, and executed through it (/proc/self/fd/N, see
// LaunchSpec.Exe): what was checked is what runs, even if the name is
// replaced in between.

// LockFileName is the lock file a plugin directory may hold.
const LockFileName = "attnrun-plugins.lock"

// Candidate is a file in a plugin directory named like a backend.
type Candidate struct {
	// Name is the backend name: the file name without ExecutablePrefix.
	Name string
	Path string
	// SHA256 is the file's SHA-256 (hex), when it could be read.
	SHA256 string
	// Reason is set when the file is refused (not a regular file, not
	// executable, writable by others, not pinned, ...); such candidates are
	// listed so that they can be reported as unavailable, and are never
	// executed.
	Reason string
}

// Discover lists the attnrun-backend-* files in dir, sorted by name, and
// verifies each (see above) without executing it. lockFile names a lock
// file ("" : LockFileName in dir, when present). An empty dir gives no
// candidates.
func Discover(dir, lockFile string) ([]Candidate, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin dir: %w", err)
	}
	v := newVerifier(dir, lockFile)
	var out []Candidate
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ExecutablePrefix) || len(e.Name()) == len(ExecutablePrefix) {
			continue
		}
		c := Candidate{Name: strings.TrimPrefix(e.Name(), ExecutablePrefix), Path: dir + string(os.PathSeparator) + e.Name()}
		f, sum, err := v.open(e.Name(), true)
		if f != nil {
			f.Close()
		}
		c.SHA256 = sum
		if err != nil {
			c.Reason = err.Error()
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// OpenPlugin verifies the plugin attnrun-backend-<name> in dir (see above)
// and returns it open, for LaunchSpec.Exe, with its path; lockFile is as
// for Discover. A file that does not exist gives an error wrapping
// fs.ErrNotExist.
func OpenPlugin(dir, name, lockFile string) (*os.File, string, error) {
	v := newVerifier(dir, lockFile)
	f, _, err := v.open(ExecutablePrefix+name, false)
	return f, filepath.Join(dir, ExecutablePrefix+name), err
}

// verifier checks the files of one plugin directory.
type verifier struct {
	dir string
	// realDir is dir with symlinks resolved; dirErr is why dir is refused.
	realDir string
	dirErr  error
	// pins maps file names to SHA-256 (hex) when a lock file is in effect;
	// lockErr is why the lock file cannot be used.
	pins     map[string]string
	lockPath string
	lockErr  error
}

func newVerifier(dir, lockFile string) *verifier {
	v := &verifier{dir: dir}
	v.realDir, v.dirErr = filepath.EvalSymlinks(dir)
	if v.dirErr == nil {
		v.dirErr = checkDir(v.realDir)
	}
	if v.dirErr != nil {
		v.dirErr = fmt.Errorf("plugin directory %s: %w", dir, v.dirErr)
	}
	v.lockPath = lockFile
	if lockFile == "" {
		v.lockPath = filepath.Join(dir, LockFileName)
		if _, err := os.Lstat(v.lockPath); errors.Is(err, fs.ErrNotExist) {
			v.lockPath = ""
			return v
		}
	}
	v.pins, v.lockErr = readLock(v.lockPath)
	if v.lockErr != nil {
		v.lockErr = fmt.Errorf("lock file %s: %w", v.lockPath, v.lockErr)
	}
	return v
}

// open verifies the file name in the plugin directory and returns it open
// (nil on a refusal, unless only the pin failed) with its SHA-256, computed
// when hash is set or a lock file is in effect.
func (v *verifier) open(name string, hash bool) (*os.File, string, error) {
	path := filepath.Join(v.dir, name)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, "", err
	}
	if v.dirErr != nil {
		return nil, "", v.dirErr
	}
	target := path
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return nil, "", fmt.Errorf("broken symlink: %w", err)
		}
		rel, err := filepath.Rel(v.realDir, target)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, "", fmt.Errorf("symlink to %s, outside the plugin directory", target)
		}
		if parent := filepath.Dir(target); parent != v.realDir {
			if err := checkDir(parent); err != nil {
				return nil, "", fmt.Errorf("symlink to %s: its directory: %w", target, err)
			}
		}
	} else if !fi.Mode().IsRegular() {
		return nil, "", errors.New("not a regular file")
	}
	// O_NONBLOCK: a FIFO swapped in after the Lstat must not block the open.
	f, err := os.OpenFile(target, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", err
	}
	if err := checkFile(f, true); err != nil {
		f.Close()
		return nil, "", err
	}
	var sum string
	if hash || v.lockPath != "" {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			f.Close()
			return nil, "", fmt.Errorf("reading: %w", err)
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	if v.lockPath != "" {
		if err := v.checkPin(name, sum); err != nil {
			f.Close()
			return nil, sum, err
		}
	}
	return f, sum, nil
}

// checkPin compares a file's SHA-256 with the lock file's.
func (v *verifier) checkPin(name, sum string) error {
	if v.lockErr != nil {
		return v.lockErr
	}
	want, ok := v.pins[name]
	switch {
	case !ok:
		return fmt.Errorf("not pinned in %s", v.lockPath)
	case want != sum:
		return fmt.Errorf("SHA-256 %s does not match %s pinned in %s", sum, want, v.lockPath)
	}
	return nil
}

// checkDir refuses a directory that group or others may write, or that
// someone other than root or the current user owns.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("writable by group or others (mode %v)", fi.Mode())
	}
	return checkOwner(fi)
}

// checkFile checks an open plugin (exec: must be executable) or lock file.
func checkFile(f *os.File, exec bool) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	m := fi.Mode()
	switch {
	case !m.IsRegular():
		return errors.New("not a regular file")
	case exec && m.Perm()&0o111 == 0:
		return fmt.Errorf("not executable (mode %v)", m.Perm())
	case m.Perm()&0o022 != 0:
		return fmt.Errorf("writable by group or others (mode %v)", m.Perm())
	case m&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		return fmt.Errorf("setuid or setgid (mode %v)", m)
	}
	return checkOwner(fi)
}

// checkOwner refuses a file owned by someone other than root or the
// current user.
func checkOwner(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if st.Uid == 0 || int(st.Uid) == os.Geteuid() {
		return nil
	}
	who := "uid " + strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
		who += " (" + u.Username + ")"
	}
	return fmt.Errorf("owned by %s, not by root or the user running attnrun", who)
}

// readLock reads a lock file: "<sha256 hex>  <file name>" lines (a '*'
// before the name, as sha256sum -b writes, is allowed), blank lines and
// '#' comments.
func readLock(path string) (map[string]string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkFile(f, false); err != nil {
		return nil, err
	}
	pins := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimSpace(name), "*")
		if b, err := hex.DecodeString(sum); !ok || err != nil || len(b) != sha256.Size || name == "" {
			return nil, fmt.Errorf("line %d: want \"<sha256 hex>  <file name>\", got %q", n, line)
		}
		pins[filepath.Base(name)] = strings.ToLower(sum)
	}
	return pins, sc.Err()
}
