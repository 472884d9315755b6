package kernel

// bf16Samples holds the bf16 macros' encodings (see bf16_amd64.s); it is
// never called, only declared for go vet's assembly checks.
//
//lint:ignore U1000 its code is read through bf16SamplesAddr
func bf16Samples()

// bf16SamplesAddr returns bf16Samples' first instruction byte, for
// reading its code.
func bf16SamplesAddr() *byte
