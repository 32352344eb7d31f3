"""Launch the fixture library's kernel and report what CUDA says (run AFTER checks.py's report).

``python3 scripts/gpu/launch_fixture.py LIB.so`` prints one JSON object: the CUDA error the launch
returned (cudaErrorNoKernelImageForDevice, 209, for a library with no code for this GPU) and, when
it ran, whether the result is right. Proves that what checks.py said before any launch is true.
"""

import ctypes
import json
import os
import sys


def main() -> None:
    path = sys.argv[1]
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.kiln_scale_launch.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_float, ctypes.c_int]
    lib.kiln_scale_launch.restype = ctypes.c_int
    lib.kiln_error_name.argtypes = [ctypes.c_int]
    lib.kiln_error_name.restype = ctypes.c_char_p
    n = 4096
    data = (ctypes.c_float * n)(*[float(i % 97) for i in range(n)])
    rc = lib.kiln_scale_launch(data, 3.0, n)
    ok = rc == 0 and all(data[i] == 3.0 * (i % 97) for i in range(n))
    print(json.dumps({
        "library": os.path.basename(path),
        "cuda_error": rc,
        "cuda_error_name": lib.kiln_error_name(rc).decode(),
        "result_correct": ok,
    }))


if __name__ == "__main__":
    main()
