package kernel

// bf16Samples holds the bf16 macros' encodings (see bf16_amd64.s); it is
// never called.
func bf16Samples()

// bf16SamplesAddr returns bf16Samples' first instruction byte, for
// reading its code.
func bf16SamplesAddr() *byte
