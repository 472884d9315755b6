package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/runtime/session"
	"github.com/attnrun/attnrun/viz"
)

func newProfileCmd(g *globalFlags) *cobra.Command {
	var in inputFlags
	var iters, warmup int
	var tracePath string
	cmd := &cobra.Command{
		Use:   "profile MODEL.onnx --input NAME=SOURCE ... [--iters N] [--trace FILE]",
		Short: "Time every plan step inside the backends: a table per op type and node, and a Chrome trace",
		Long: `profile runs the model --warmup times, then --iters times with profiling on:
each backend times every step of its plan (the cpu backend does; fused regions
are one step) and the host times its calls and tensor transfers. It prints
the mean time per run, then op types and nodes sorted by time with their share
of all step time, and writes a Chrome trace-event JSON (open it in
https://ui.perfetto.dev or chrome://tracing) with one process per backend and
one for the host.`,
		Example: `  attnrun profile models/s001_encoder_2x4/model.onnx -i x=random:2x128x32 -i mask=random:2x128 --trace encoder.json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if iters < 1 {
				return usageErrorf("--iters must be ≥ 1")
			}
			if warmup < 0 {
				return usageErrorf("--warmup must be ≥ 0")
			}
			if tracePath == "" {
				return usageErrorf("--trace needs a file name")
			}
			if err := checkOutputFile("--trace", tracePath); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := g.open(ctx, args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			loaded, err := in.load(s.Inputs(), g.maxTensorBytes)
			if err != nil {
				return err
			}
			inputs, err := session.ToDense(loaded)
			if err != nil {
				return err
			}
			// As bench does: inputs and bound outputs in the memory the
			// backends share (ordinary tensors in process).
			shared := &sharedTensors{s: s}
			defer shared.free()
			for name, d := range inputs {
				if inputs[name], err = shared.copyOf(d); err != nil {
					return fmt.Errorf("input %q: %w", name, err)
				}
			}
			prof := &session.Profile{}
			var bar *progress
			if w := cmd.ErrOrStderr(); isTerminal(w) {
				bar = newProgress(w, "profile", warmup+iters)
			}
			_, _, err = benchLoop(ctx, s, inputs, warmup, iters, 1, true, shared, bar, prof)
			bar.finish()
			if err != nil {
				return err
			}
			return writeProfile(cmd.OutOrStdout(), args[0], s, prof, tracePath)
		},
	}
	in.register(cmd)
	cmd.Flags().IntVarP(&iters, "iters", "n", 10, "profiled runs")
	cmd.Flags().IntVar(&warmup, "warmup", 2, "unprofiled runs first")
	cmd.Flags().StringVar(&tracePath, "trace", "attnrun-profile.json", "write the Chrome trace-event JSON here")
	return cmd
}

// writeProfile prints a profile's table to w and writes its trace.
func writeProfile(w io.Writer, model string, s *session.Session, prof *session.Profile, tracePath string) error {
	sum := viz.Summarize(prof.Runs)
	fmt.Fprintf(w, "profile of %s on %s\n", model, backendSummary(s))
	sum.WriteTable(w)
	tr := viz.NewTrace(prof.Runs, os.Getpid(), map[string]string{"model": model, "tool": "attnrun profile"})
	if err := tr.WriteFile(tracePath); err != nil {
		return fmt.Errorf("writing the trace: %w", err)
	}
	fmt.Fprintf(w, "\ntrace: %s (%d events; open in https://ui.perfetto.dev or chrome://tracing)\n", tracePath, len(tr.TraceEvents))
	return nil
}
