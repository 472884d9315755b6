package serve

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fileLog is a logger writing to a file, and a function that reads back
// what it wrote so far (a file, so that reading races no goroutine that logs).
func fileLog(t *testing.T) (*slog.Logger, func() string) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewTextHandler(f, nil)), func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// TestOperatorSeesLoadProblems: the server's log, not only the client's
// answer, tells of a repository with no models and of a load request that
// failed (a broken new version; the old one keeps serving).
func TestOperatorSeesLoadProblems(t *testing.T) {
	logger, logged := fileLog(t)
	empty := start(t, Options{Repository: t.TempDir(), Logger: logger})
	if !strings.Contains(logged(), "level=WARN msg=\"no models to serve") {
		t.Errorf("an empty repository logged no warning:\n%s", logged())
	}
	empty.Close()

	logger, logged = fileLog(t)
	dir := repository(t, map[string]string{"causal/1": "s000_causal"})
	s := start(t, Options{Repository: dir, Logger: logger})
	if strings.Contains(logged(), "no models to serve") {
		t.Errorf("a repository with a model logged that it has none:\n%s", logged())
	}
	if err := os.MkdirAll(filepath.Join(dir, "causal", "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "causal", "2", "model.onnx"), []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.HTTPHandler(1 << 20))
	defer ts.Close()
	if resp, body := post(t, ts.URL+"/v2/repository/models/causal/load", "application/json", nil, nil); resp.StatusCode != 400 {
		t.Fatalf("loading a broken version: %d %s, want 400", resp.StatusCode, body)
	}
	for _, want := range []string{`level=ERROR msg="load request failed; the versions loaded before keep serving" model=causal protocol=http`, "not an ONNX model"} {
		if !strings.Contains(logged(), want) {
			t.Errorf("log lacks %q:\n%s", want, logged())
		}
	}
	if ready, err := s.ModelReady("causal", "1"); err != nil || !ready {
		t.Errorf("version 1 after the failed load: ready %v, %v", ready, err)
	}
}
