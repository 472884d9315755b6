package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/conform"
)

func newConformCmd(g *globalFlags) *cobra.Command {
	var tol conform.Tolerance
	var quiet bool
	cmd := &cobra.Command{
		Use:   "conform DIR...",
		Short: "Check models against reference outputs (ONNX backend-test layout)",
		Long: `conform runs every test case found in or under each DIR: a directory with
model.onnx and test_data_set_N/{input,output}_K.pb. It prints one line per case,
PASS or FAIL, the case name, and the largest absolute and relative errors over
the outputs it compared (none when a case failed before comparing any, e.g. a
model that does not load), then "N passed, N failed". It exits 1 if any case
fails.

A case passes only when everything it holds was checked: every graph output K
has its output_K.pb in every data set (a missing one is a FAIL naming it), and
every output_K.pb and input_K.pb matches a graph output or input (by index K,
as in ONNX's backend tests).

With --precision bf16 the default tolerance is rtol 2e-2, atol 1e-2
(conform.BF16Tolerance): bfloat16 operands keep 8 significant bits, so
products are off by about 2^-9 of the magnitudes summed, against fp32
references. A case whose own numerics amplify that (Swin V2's cosine
attention scales its scores by up to 100 after the product) holds its
tolerance and the reason in bf16_tolerance.json; conform uses it, unless
--rtol or --atol is given, and prints it beside the case's result.`,
		Example: "  attnrun conform models/\n  attnrun conform --precision bf16 models/\n  attnrun conform --backend cpu --rtol 1e-3 /usr/share/libonnx-testdata/data/node/test_softmax_axis_0",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tol.Rtol < 0 || tol.Atol < 0 {
				return usageErrorf("--rtol and --atol must be ≥ 0")
			}
			if err := g.checkPrecision(); err != nil {
				return err
			}
			// bf16 products cannot meet fp32's tolerance: unless --rtol or
			// --atol says otherwise, use conform.BF16Tolerance (or a case's
			// own, bf16_tolerance.json), and say so.
			caseTolerance := false
			if p, _ := ops.ParsePrecision(g.precision); p == ops.PrecisionBF16 {
				caseTolerance = !cmd.Flags().Changed("rtol") && !cmd.Flags().Changed("atol")
				if !cmd.Flags().Changed("rtol") {
					tol.Rtol = conform.BF16Tolerance.Rtol
				}
				if !cmd.Flags().Changed("atol") {
					tol.Atol = conform.BF16Tolerance.Atol
				}
				fmt.Fprintf(cmd.OutOrStdout(), "precision bf16: tolerance rtol %g atol %g (bfloat16 keeps 8 significant bits; --rtol/--atol override)\n", tol.Rtol, tol.Atol)
			}
			cases, err := conform.Find(args)
			if err != nil {
				return err
			}
			open := func(ctx context.Context, path string) (conform.Runner, error) {
				s, err := g.open(ctx, path)
				if err != nil {
					return nil, err
				}
				return sessionRunner{g, s}, nil
			}
			w := cmd.OutOrStdout()
			passed, failed := 0, 0
			for _, c := range cases {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				caseTol, note := tol, ""
				if caseTolerance && c.BF16 != nil {
					caseTol = c.BF16.Tolerance
					note = fmt.Sprintf(" (its own bf16 tolerance rtol %g atol %g: %s; PyTorch's bf16 autocast: max_abs=%.3g)", caseTol.Rtol, caseTol.Atol, c.BF16.Why, c.BF16.TorchBF16)
				}
				r := conform.Run(cmd.Context(), c, open, caseTol)
				figures := ""
				if r.Compared > 0 {
					figures = fmt.Sprintf(" max_abs=%.3g max_rel=%.3g", r.MaxAbs, r.MaxRel)
				}
				figures += note
				if r.Pass {
					passed++
					if !quiet {
						fmt.Fprintf(w, "PASS %s%s\n", c.Name, figures)
					}
				} else {
					failed++
					fmt.Fprintf(w, "FAIL %s%s: %v\n", c.Name, figures, r.Err)
				}
			}
			fmt.Fprintf(w, "%d passed, %d failed\n", passed, failed)
			if failed > 0 {
				return exitError{fmt.Errorf("%d of %d cases failed", failed, len(cases)), 1}
			}
			return nil
		},
	}
	cmd.Flags().Float64Var(&tol.Rtol, "rtol", 1e-4, "relative tolerance")
	cmd.Flags().Float64Var(&tol.Atol, "atol", 1e-5, "absolute tolerance")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only failures and the summary")
	return cmd
}
