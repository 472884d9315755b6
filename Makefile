.PHONY: models

# Regenerate the reference ONNX models and test data in models/ (committed;
# CI does not need this). Needs Debian's PyTorch/ONNX for the system Python:
#   apt-get install python3-torch python3-onnx python3-numpy
# Large benchmark exports (not committed): /usr/bin/python3 models/export.py --bench /tmp/bench_models
models:
	/usr/bin/python3 models/export.py
