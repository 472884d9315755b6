package plugins

import "testing"

// TestTidyLogLine: a backend's own warning or error, as the host's logger
// writes it, becomes one plain line; go-plugin's and others' lines stay.
func TestTidyLogLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`2026-11-28T17:03:49.065Z [WARN]  attnrun-plugin.attnrun: attention at node "/Softmax" (Softmax) runs unfused: node "/Tanh" (Tanh) in the scores: @module=attnrun-backend timestamp=2026-11-28T17:03:49.065Z`,
			`warning: attention at node "/Softmax" (Softmax) runs unfused: node "/Tanh" (Tanh) in the scores`},
		{`2026-11-28T17:03:49.065Z [ERROR] attnrun-plugin.attnrun-backend-gpu: no device: @module=attnrun-backend timestamp=2026-11-28T17:03:49.065Z`,
			`error: no device`},
		{`2026-11-28T17:03:49.065Z [WARN]  attnrun-plugin: plugin failed to exit gracefully`, `2026-11-28T17:03:49.065Z [WARN]  attnrun-plugin: plugin failed to exit gracefully`},
		{`no timestamp here: @module=attnrun-backend timestamp=x`, `no timestamp here: @module=attnrun-backend timestamp=x`},
	} {
		if got := TidyLogLine(c.in); got != c.want {
			t.Errorf("TidyLogLine(%q)\n= %q\nwant %q", c.in, got, c.want)
		}
	}
}
