package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/npy"
	"github.com/attnrun/attnrun/runtime/session"
)

// inputFlags are the flags of commands that feed a model.
type inputFlags struct {
	inputs []string
	dims   []string
	seed   uint64
}

func (f *inputFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVarP(&f.inputs, "input", "i", nil, "NAME=file.npy, NAME=file.pb (TensorProto) or NAME=random[:1x512x768] (repeatable)")
	cmd.Flags().StringArrayVar(&f.dims, "dim", nil, "bind a symbolic dim for NAME=random inputs, e.g. --dim seq=128 (repeatable)")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "seed for random inputs")
}

// load reads the inputs for a model's declared inputs.
func (f *inputFlags) load(declared []*ir.ValueInfo, maxBytes int64) (map[string]*ir.Tensor, error) {
	specs, err := parseInputSpecs(f.inputs)
	if err != nil {
		return nil, err
	}
	dims, err := parseDims(f.dims)
	if err != nil {
		return nil, err
	}
	l := &inputLoader{declared: declared, dims: dims, maxBytes: maxBytes, seed: f.seed}
	return l.load(specs)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// outputFileName maps an output name to a safe .npy file name.
func outputFileName(name string) string { return unsafeName.ReplaceAllString(name, "_") + ".npy" }

func newRunCmd(g *globalFlags) *cobra.Command {
	var in inputFlags
	var outDir, mapsDir string
	cmd := &cobra.Command{
		Use:   "run MODEL.onnx --input NAME=SOURCE ...",
		Short: "Run a model once and print (or save) its outputs",
		Example: `  attnrun run models/s000_multi_head/model.onnx --input x=random:1x16x32
  attnrun run model.onnx -i x=x.npy -i mask=mask.npy --out results/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := g.openWith(ctx, args[0], func(o *session.Options) { o.AttentionWeights = mapsDir != "" })
			if err != nil {
				return err
			}
			defer s.Close()
			inputs, err := in.load(s.Inputs(), g.maxTensorBytes)
			if err != nil {
				return err
			}
			start := time.Now()
			var ro session.RunOptions
			if mapsDir != "" {
				ro.Profile = &session.Profile{} // says which attention cores ran fused
			}
			outs, err := runIRWith(ctx, s, inputs, ro)
			if err != nil {
				return err
			}
			elapsed := time.Since(start)
			w := cmd.OutOrStdout()
			if outDir != "" {
				if err := os.MkdirAll(outDir, 0o755); err != nil {
					return err
				}
			}
			for _, vi := range s.Outputs() {
				t := outs[vi.Name]
				fmt.Fprintf(w, "%s: %v [%s] %s\n", vi.Name, t.DType, ir.ShapeString(t.Shape), t.Preview(8))
				if outDir != "" {
					path := filepath.Join(outDir, outputFileName(vi.Name))
					if err := npy.WriteFile(path, t); err != nil {
						return err
					}
					fmt.Fprintf(w, "  wrote %s\n", path)
				}
			}
			if mapsDir != "" {
				if err := writeAttentionMaps(w, cmd.ErrOrStderr(), s, args[0], inputs, outs, mapsDir, ro.Profile); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "ran in %.2f ms on %s\n", float64(elapsed.Microseconds())/1000, backendSummary(s))
			return nil
		},
	}
	in.register(cmd)
	cmd.Flags().StringVarP(&outDir, "out", "o", "", "write one NAME.npy per output into this directory")
	cmd.Flags().StringVar(&mapsDir, "attention-maps", "", "write every attention core's weights (.npy), one heat map per batch item and head (.png) and index.html into this directory")
	return cmd
}
