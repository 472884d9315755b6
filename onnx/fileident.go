package onnx

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"github.com/attnrun/attnrun/ir"
)

// File identity. Weights reach a backend by reference (EncodeExternal): the
// backend opens the model's files by path, and a backend restarted by the
// host opens them again, maybe after the model was replaced (a new file
// renamed over it, or one written in place). Each reference therefore
// carries the identity of the file the host loaded (ir.ExternalData.File:
// device, inode, size, modification time), recorded when the file is first
// opened and sent under fileIdentityKey beside ONNX's location, offset and
// length; whoever opens the file by path again (externalTensor,
// NewWeightStore) refuses a file that is not that one, with an error that
// says what changed, instead of computing the loaded graph with another
// model's weights.

// fileIdentityKey is the external_data key (a StringStringEntryProto, which
// ONNX lets carry keys beyond location, offset, length and checksum) under
// which a reference carries its file's identity, as formatIdentity writes
// it: "dev=2049,ino=1234,size=5678,mtime_ns=1700000000123456789".
const fileIdentityKey = "attnrun_file_identity"

// identityOf is the identity of the file st describes (st from a Stat of
// the open file). Device and inode are zero where the system has none.
func identityOf(st fs.FileInfo) ir.FileIdentity {
	id := ir.FileIdentity{Size: st.Size(), ModTimeNs: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.Dev, id.Ino = uint64(sys.Dev), uint64(sys.Ino)
	}
	return id
}

// formatIdentity writes id as the value of fileIdentityKey.
func formatIdentity(id ir.FileIdentity) string {
	return fmt.Sprintf("dev=%d,ino=%d,size=%d,mtime_ns=%d", id.Dev, id.Ino, id.Size, id.ModTimeNs)
}

// parseIdentity reads a value of fileIdentityKey, exactly as formatIdentity
// writes it.
func parseIdentity(s string) (ir.FileIdentity, error) {
	var id ir.FileIdentity
	if _, err := fmt.Sscanf(s, "dev=%d,ino=%d,size=%d,mtime_ns=%d", &id.Dev, &id.Ino, &id.Size, &id.ModTimeNs); err != nil || formatIdentity(id) != s || !id.Known() {
		return ir.FileIdentity{}, fmt.Errorf("external data %s %q is not dev=N,ino=N,size=N,mtime_ns=N", fileIdentityKey, s)
	}
	return id, nil
}

// checkIdentity returns nil when the file at path, opened and described by
// st, is the file want identifies (or want is unknown), and otherwise an
// error that names the file, says what differs and what to do.
func checkIdentity(path string, want ir.FileIdentity, st fs.FileInfo) error {
	got := identityOf(st)
	if !want.Known() || got == want {
		return nil
	}
	var diff []string
	if got.Dev != want.Dev || got.Ino != want.Ino {
		diff = append(diff, fmt.Sprintf("another file: device %d inode %d, was device %d inode %d", got.Dev, got.Ino, want.Dev, want.Ino))
	}
	if got.Size != want.Size {
		diff = append(diff, fmt.Sprintf("%d bytes, was %d", got.Size, want.Size))
	}
	if got.ModTimeNs != want.ModTimeNs {
		diff = append(diff, fmt.Sprintf("modified %s, was %s", nsTime(got.ModTimeNs), nsTime(want.ModTimeNs)))
	}
	return fmt.Errorf("%s changed since the model was loaded from it (replaced or rewritten: %s); its weights may be another model's: open a new session (reload the model) to use the new file", path, strings.Join(diff, "; "))
}

// nsTime formats a modification time in nanoseconds since the Unix epoch.
func nsTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}
