"""explain: real-looking failure logs map to the right cause, line and fix; clean logs to none."""

# The logs below are test data in the shape the tools print them: long lines, and pip's and
# uv's box-drawing and multiplication signs.

from __future__ import annotations

import importlib
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
from support.cli import run

from verl_bundle.airgap.cli import main as cli_main
from verl_bundle.airgap.explain import engine as explain
from verl_bundle.airgap.explain import signatures
from verl_bundle.airgap.explain.engine import Finding, explain_text, render_json, render_text

ROOT = Path(__file__).resolve().parents[1]
PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python")

# -- test data: what the tools really print, with the noise around it -------------------------

PIP_NO_MATCH = """\
$ /home/ops/verl-cu118-cp310/bin/python /opt/verl-bundle/bootstrap/pip-24.0-py3-none-any.whl/pip install --no-index --no-deps --require-hashes --find-links /opt/verl-bundle/wheels -r /opt/verl-bundle/requirements/10-torch.txt
Looking in links: /opt/verl-bundle/wheels
Processing /opt/verl-bundle/wheels/filelock-3.13.1-py3-none-any.whl
Processing /opt/verl-bundle/wheels/typing_extensions-4.9.0-py3-none-any.whl
ERROR: Could not find a version that satisfies the requirement torch==2.1.2+cu118 (from versions: none)
ERROR: No matching distribution found for torch==2.1.2+cu118
"""

UV_NOT_FOUND = """\
$ /home/ops/verl/.verl-bundle/uv/uv pip install --python /home/ops/verl/bin/python --offline --no-index --no-deps --require-hashes --find-links /opt/verl-bundle/wheels -r /opt/verl-bundle/requirements/20-verl.txt
Using Python 3.11.7 environment at: /home/ops/verl
  × No solution found when resolving dependencies:
  ╰─▶ Because tensordict was not found in the provided package locations and you require tensordict==0.5.0, we can conclude that your requirements are unsatisfiable.
"""

TRITON_PYTHON_H = """\
(WorkerDict pid=41873) INFO 05-14 10:02:11 model_runner.py:756] Capturing the model for CUDA graphs.
(WorkerDict pid=41873) Traceback (most recent call last):
(WorkerDict pid=41873)   File "/home/ops/verl/lib/python3.10/site-packages/triton/runtime/jit.py", line 540, in run
(WorkerDict pid=41873)     kernel = self.compile(src, target=target, options=options.__dict__)
(WorkerDict pid=41873)   File "/home/ops/verl/lib/python3.10/site-packages/triton/common/build.py", line 90, in _build
(WorkerDict pid=41873)     ret = subprocess.check_call(cc_cmd)
(WorkerDict pid=41873) /tmp/tmpq8w1x0r3/main.c:2:10: fatal error: Python.h: No such file or directory
(WorkerDict pid=41873)     2 | #include <Python.h>
(WorkerDict pid=41873)       |          ^~~~~~~~~~
(WorkerDict pid=41873) compilation terminated.
(WorkerDict pid=41873) subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpq8w1x0r3/main.c', '-O3', '-I/home/ops/verl/lib/python3.10/site-packages/triton/common/../third_party/cuda/include', '-I/usr/include/python3.10', '-I/tmp/tmpq8w1x0r3', '-shared', '-fPIC', '-lcuda', '-o', '/tmp/tmpq8w1x0r3/cuda_utils.cpython-310-x86_64-linux-gnu.so', '-L/usr/lib/x86_64-linux-gnu']' returned non-zero exit status 1.
"""

PSUTIL_PYTHON_H = """\
  Building wheel for psutil (pyproject.toml) ... error
  error: subprocess-exited-with-error

  × Building wheel for psutil (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [22 lines of output]
      running build_ext
      building 'psutil._psutil_linux' extension
      creating build/temp.linux-x86_64-cpython-311/psutil
      gcc -pthread -Wsign-compare -DNDEBUG -g -fwrapv -O2 -Wall -fPIC -DPSUTIL_POSIX=1 -DPSUTIL_SIZEOF_PID_T=4 -DPSUTIL_VERSION=596 -DPy_LIMITED_API=0x03060000 -DPSUTIL_LINUX=1 -I/home/ops/verl/include -I/usr/include/python3.11 -c psutil/_psutil_common.c -o build/temp.linux-x86_64-cpython-311/psutil/_psutil_common.o
      psutil/_psutil_common.c:9:10: fatal error: Python.h: No such file or directory
          9 | #include <Python.h>
            |          ^~~~~~~~~~
      compilation terminated.
      error: command '/usr/bin/gcc' failed with exit code 1
      [end of output]
"""

LIBCUDA = """\
==> [6/7] post-install checks
$ env PYTHONPATH=/opt/verl-bundle/lib /home/ops/verl/bin/python -m verl_bundle.airgap postinstall --bundle /opt/verl-bundle
ok   import torch 2.1.2+cu118 (CUDA 11.8, cxx11abi False)
Traceback (most recent call last):
  File "/home/ops/verl/lib/python3.10/site-packages/triton/runtime/driver.py", line 54, in __init__
    self.utils = CudaUtils()
  File "/home/ops/verl/lib/python3.10/site-packages/triton/common/build.py", line 22, in libcuda_dirs
    libs = subprocess.check_output(["/sbin/ldconfig", "-p"]).decode()
  File "/usr/lib/python3.10/ctypes/__init__.py", line 374, in __init__
    self._handle = _dlopen(self._name, mode)
OSError: libcuda.so.1: cannot open shared object file: No such file or directory
FAILED import triton.runtime.driver
"""

TORCH_NO_DRIVER = """\
>>> import torch
>>> torch.zeros(1).cuda()
Traceback (most recent call last):
  File "<stdin>", line 1, in <module>
  File "/home/ops/verl/lib/python3.10/site-packages/torch/cuda/__init__.py", line 298, in _lazy_init
    torch._C._cuda_init()
RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx
"""

FLASH_ATTN_MISSING = """\
Processing /opt/verl-bundle/sources/flash_attn-2.5.8.tar.gz
Building wheels for collected packages: flash-attn
  Building wheel for flash-attn (setup.py): started
  Building wheel for flash-attn (setup.py): finished with status 'done'
  Created wheel for flash-attn: filename=flash_attn-2.5.8-cp310-cp310-linux_x86_64.whl size=120616320 sha256=7b1c3e
Successfully built flash-attn
Installing collected packages: flash-attn
Successfully installed flash-attn-2.5.8
$ python3 -c "import verl; from flash_attn import flash_attn_func"
Traceback (most recent call last):
  File "<string>", line 1, in <module>
ModuleNotFoundError: No module named 'flash_attn'
"""

TRANSFORMERS_NO_FLASH = """\
(WorkerDict pid=9312) Loading checkpoint shards: 100%|##########| 4/4 [00:03<00:00,  1.21it/s]
(WorkerDict pid=9312)   File "/home/ops/verl/lib/python3.10/site-packages/transformers/modeling_utils.py", line 1574, in _check_and_enable_flash_attn_2
(WorkerDict pid=9312)     raise ImportError(f"{preface} the package flash_attn seems to be not installed. {install_message}")
(WorkerDict pid=9312) ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: the package flash_attn seems to be not installed. Please refer to the documentation of https://huggingface.co/docs/transformers/perf_infer_gpu_one#flashattention-2 to install Flash Attention 2.
"""

_NVCC_CMD = (
    "/usr/local/cuda-11.8/bin/nvcc  -I/tmp/pip-install-ab12cd/flash-attn_5c1e/csrc/flash_attn "
    "-I/tmp/pip-install-ab12cd/flash-attn_5c1e/csrc/flash_attn/src "
    "-I/tmp/pip-install-ab12cd/flash-attn_5c1e/csrc/cutlass/include "
    "-I/home/ops/verl/lib/python3.10/site-packages/torch/include "
    "-I/usr/local/cuda-11.8/include -I/usr/include/python3.10 -c -c "
    "/tmp/pip-install-ab12cd/flash-attn_5c1e/csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.cu "
    "-o /tmp/pip-install-ab12cd/flash-attn_5c1e/build/temp.linux-x86_64-cpython-310/csrc/"
    "flash_attn/src/flash_bwd_hdim128_bf16_sm80.o -D__CUDA_NO_HALF_OPERATORS__ "
    "-D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ "
    "-D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr --compiler-options ''\"'\"'-fPIC'\"'\"'' "
    "-O3 -std=c++17 -U__CUDA_NO_HALF_OPERATORS__ --use_fast_math -gencode arch=compute_80,"
    "code=sm_80 -gencode arch=compute_90,code=sm_90 --threads 4 -DTORCH_EXTENSION_NAME="
    "flash_attn_2_cuda -D_GLIBCXX_USE_CXX11_ABI=0 -ccbin gcc"
)

NVCC_GCC = f"""\
      running build_ext
      Emitting ninja build file /tmp/pip-install-ab12cd/flash-attn_5c1e/build/temp.linux-x86_64-cpython-310/build.ninja...
      Compiling objects...
      Using envvar MAX_JOBS (4) as the number of workers...
      [1/49] {_NVCC_CMD}
      FAILED: /tmp/pip-install-ab12cd/flash-attn_5c1e/build/temp.linux-x86_64-cpython-310/csrc/flash_attn/src/flash_bwd_hdim128_bf16_sm80.o
      In file included from /usr/local/cuda-11.8/bin/../targets/x86_64-linux/include/cuda_runtime.h:83,
                       from <command-line>:
      /usr/local/cuda-11.8/bin/../targets/x86_64-linux/include/crt/host_config.h:132:2: error: #error -- unsupported GNU version! gcc versions later than 11 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host compiler may cause compilation failure or incorrect run time execution. Use at your own risk.
        132 | #error -- unsupported GNU version! gcc versions later than 11 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host compiler may cause compilation failure or incorrect run time execution. Use at your own risk.
            |  ^~~~~
      ninja: build stopped: subcommand failed.
"""

NVCC_GCC_CUDA121 = """\
      /usr/local/cuda-12.1/bin/../targets/x86_64-linux/include/crt/host_config.h:143:2: error: #error -- unsupported GNU version! gcc versions later than 12 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host compiler may cause compilation failure or incorrect run time execution. Use at your own risk.
        143 | #error -- unsupported GNU version! gcc versions later than 12 are not supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check; however, using an unsupported host compiler may cause compilation failure or incorrect run time execution. Use at your own risk.
      ninja: build stopped: subcommand failed.
"""

TORCH_GCC_CHECK = """\
      running build_ext
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 525, in build_extensions
          _check_cuda_version(compiler_name, compiler_version)
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 449, in _check_cuda_version
          raise RuntimeError(f'The current installed version of {compiler_name} ({compiler_version}) is greater than the maximum required version by CUDA {cuda_str_version}. Please make sure to use an adequate version of {compiler_name} ({version_bound_str}).')
      RuntimeError: The current installed version of g++ (13.2.0) is greater than the maximum required version by CUDA 11.8. Please make sure to use an adequate version of g++ (>=6.0.0, <12.0).
      [end of output]
"""

CUDA_MISMATCH = """\
      torch.__version__  = 2.1.2+cu118


      running bdist_wheel
      running build_ext
      Traceback (most recent call last):
        File "<string>", line 2, in <module>
        File "<pip-setuptools-caller>", line 34, in <module>
        File "/tmp/pip-install-ab12cd/flash-attn_5c1e/setup.py", line 311, in <module>
          setup(
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 525, in build_extensions
          _check_cuda_version(compiler_name, compiler_version)
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 413, in _check_cuda_version
          raise RuntimeError(CUDA_MISMATCH_MESSAGE.format(cuda_str_version, torch.version.cuda))
      RuntimeError:
      The detected CUDA version (12.2) mismatches the version that was used to compile
      PyTorch (11.8). Please make sure to use the same CUDA versions.

      [end of output]
"""

# flash-attn 2.5.8's setup.py catches only HTTPError around its download, so offline the
# URLError escapes (two chained tracebacks, as pip shows them).
FLASH_DOWNLOAD = """\
  Building wheel for flash-attn (setup.py): started
  Building wheel for flash-attn (setup.py): finished with status 'error'
  error: subprocess-exited-with-error

  × python setup.py bdist_wheel did not run successfully.
  │ exit code: 1
  ╰─> [64 lines of output]
      fatal: not a git repository (or any of the parent directories): .git


      torch.__version__  = 2.1.2+cu118


      running bdist_wheel
      Guessing wheel URL:  https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.8/flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl
      Traceback (most recent call last):
        File "/usr/lib/python3.10/urllib/request.py", line 1348, in do_open
          h.request(req.get_method(), req.selector, req.body, headers,
        File "/usr/lib/python3.10/http/client.py", line 1283, in request
          self._send_request(method, url, body, headers, encode_chunked)
        File "/usr/lib/python3.10/http/client.py", line 1455, in connect
          super().connect()
        File "/usr/lib/python3.10/http/client.py", line 941, in connect
          self.sock = self._create_connection(
        File "/usr/lib/python3.10/socket.py", line 824, in create_connection
          for res in getaddrinfo(host, port, 0, SOCK_STREAM):
        File "/usr/lib/python3.10/socket.py", line 955, in getaddrinfo
          for res in _socket.getaddrinfo(host, port, family, type, proto, flags):
      socket.gaierror: [Errno -3] Temporary failure in name resolution

      During handling of the above exception, another exception occurred:

      Traceback (most recent call last):
        File "<string>", line 2, in <module>
        File "<pip-setuptools-caller>", line 34, in <module>
        File "/tmp/pip-install-ab12cd/flash-attn_5c1e/setup.py", line 311, in <module>
          setup(
        File "/tmp/pip-install-ab12cd/flash-attn_5c1e/setup.py", line 289, in run
          urllib.request.urlretrieve(wheel_url, wheel_filename)
        File "/usr/lib/python3.10/urllib/request.py", line 1351, in do_open
          raise URLError(err)
      urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
  ERROR: Failed building wheel for flash-attn
"""

PIP_OFFLINE_INDEX = """\
Looking in indexes: https://pypi.org/simple
Collecting einops
  WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f3a2c1d5e10>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/einops/
  WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f3a2c1d6110>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/einops/
ERROR: Could not find a version that satisfies the requirement einops (from versions: none)
ERROR: No matching distribution found for einops
"""

INVALID_ORDINAL = """\
(WorkerDict pid=2211, ip=10.0.0.5) actor_rollout_ref.rollout.tensor_model_parallel_size=2
(WorkerDict pid=2211, ip=10.0.0.5) Traceback (most recent call last):
(WorkerDict pid=2211, ip=10.0.0.5)   File "/home/ops/verl/lib/python3.10/site-packages/verl/workers/fsdp_workers.py", line 71, in __init__
(WorkerDict pid=2211, ip=10.0.0.5)     torch.cuda.set_device(rank % torch.cuda.device_count())
(WorkerDict pid=2211, ip=10.0.0.5)   File "/home/ops/verl/lib/python3.10/site-packages/torch/cuda/__init__.py", line 404, in set_device
(WorkerDict pid=2211, ip=10.0.0.5)     torch._C._cuda_setDevice(device)
(WorkerDict pid=2211, ip=10.0.0.5) RuntimeError: CUDA error: invalid device ordinal
(WorkerDict pid=2211, ip=10.0.0.5) CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
(WorkerDict pid=2211, ip=10.0.0.5) For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
"""

DEVICE_MISMATCH = """\
  File "/home/ops/verl/lib/python3.10/site-packages/torch/nn/modules/sparse.py", line 162, in forward
    return F.embedding(
  File "/home/ops/verl/lib/python3.10/site-packages/torch/nn/functional.py", line 2233, in embedding
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0! (when checking argument for argument index in method wrapper_CUDA__index_select)
"""

NCCL_WATCHDOG = """\
(WorkerDict pid=3101) [I ProcessGroupNCCL.cpp:686] [Rank 1] ProcessGroupNCCL initialization options:NCCL_ASYNC_ERROR_HANDLING: 1, NCCL_DESYNC_DEBUG: 0, NCCL_ENABLE_TIMING: 0, NCCL_BLOCKING_WAIT: 0, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0
(WorkerDict pid=3101) step:12 - actor/pg_loss:0.013 - critic/vf_loss:0.42 - timing_s/gen:31.2
(WorkerDict pid=3101) [E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1523, OpType=ALLGATHER, NumelIn=262144, NumelOut=524288, Timeout(ms)=600000) ran for 600316 milliseconds before timing out.
(WorkerDict pid=3101) [E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
(WorkerDict pid=3101) [E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.
"""

NCCL_RENDEZVOUS = """\
[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-0]:29500 (errno: 110 - Connection timed out).
torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/2 clients joined.
"""

UNSUPPORTED_WHEEL = """\
$ /usr/bin/python3 -m pip install --no-index --no-deps --find-links /opt/verl-bundle/wheels torch==2.1.2+cu118
Looking in links: /opt/verl-bundle/wheels
ERROR: torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl is not a supported wheel on this platform.
"""

OOM_CICC = f"""\
      Using envvar MAX_JOBS (16) as the number of workers...
      [12/49] {_NVCC_CMD}
      [13/49] {_NVCC_CMD}
      FAILED: /tmp/pip-install-ab12cd/flash-attn_5c1e/build/temp.linux-x86_64-cpython-310/csrc/flash_attn/src/flash_fwd_hdim224_fp16_sm80.o
      nvcc error   : 'cicc' died due to signal 9 (Kill signal)
      ninja: build stopped: subcommand failed.
"""

OOM_CC1PLUS = """\
      [3/49] c++ -MMD -MF /tmp/pip-install-ab12cd/flash-attn_5c1e/build/temp.linux-x86_64-cpython-310/csrc/flash_attn/flash_api.o.d -pthread -B /home/ops/miniconda3/compiler_compat -O3 -std=c++17 -c /tmp/pip-install-ab12cd/flash-attn_5c1e/csrc/flash_attn/flash_api.cpp
      FAILED: /tmp/pip-install-ab12cd/flash-attn_5c1e/build/temp.linux-x86_64-cpython-310/csrc/flash_attn/flash_api.o
      c++: fatal error: Killed signal terminated program cc1plus
      compilation terminated.
      ninja: build stopped: subcommand failed.
"""

OOM_BARE_KILLED = f"""\
      [7/49] {_NVCC_CMD}
      Killed
      ninja: build stopped: subcommand failed.
      Traceback (most recent call last):
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 2100, in _run_ninja_build
          subprocess.run(
      subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '16']' returned non-zero exit status 1.
"""

PIP_HASHES = """\
Processing /opt/verl-bundle/wheels/torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl
ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
    torch==2.1.2+cu118 from file:///opt/verl-bundle/wheels/torch-2.1.2%2Bcu118-cp310-cp310-linux_x86_64.whl (from -r /opt/verl-bundle/requirements/10-torch.txt (line 3)):
        Expected sha256 60396358193f238888540f4a38d78485f161e28ec17fa445f0373b5350ef21f0
             Got        0f8a1e4bd1c4f6f9b6c5e2f8c7d3a1b2c4e5f60718293a4b5c6d7e8f90a1b2c3
"""

UV_HASHES = """\
Using Python 3.10.12 environment at: /home/ops/verl
  × Failed to read `idna==3.6`
  ╰─▶ Hash mismatch for `idna==3.6`

      Expected:
        sha256:d05567e9c24a6b9faaa835c4821bad0590fbb9d5779e7caa6e1cc4978e7eb24f

      Computed:
        sha256:c05567e9c24a6b9faaa835c4821bad0590fbb9d5779e7caa6e1cc4978e7eb24f
"""

PEP668 = """\
$ pip3 install --no-index --find-links /opt/verl-bundle/wheels -r requirements/00-base.txt
error: externally-managed-environment

× This environment is externally managed
╰─> To install Python packages system-wide, try apt install
    python3-xyz, where xyz is the package you are trying to
    install.

note: If you believe this is a mistake, please contact your Python installation or OS distribution provider. You can override this, at the risk of breaking your Python installation or OS, by passing --break-system-packages.
hint: See PEP 668 for the detailed specification.
"""

NO_ENSUREPIP = """\
$ python3 -m venv /home/ops/verl
The virtual environment was not created successfully because ensurepip is not
available.  On Debian/Ubuntu systems, you need to install the python3-venv
package using the following command.

    apt install python3.10-venv

You may need to use sudo with that command.  After installing the python3-venv
package, recreate your virtual environment.
"""

# flash-attn 2.8.3 built here with /usr/local/bin/nvcc (a wrapper) on PATH and no CUDA_HOME
# (a real run, paths shortened): torch took CUDA_HOME=/usr/local.
WRAPPER_CUDA_HOME = """\
/venv/lib/python3.10/site-packages/torch/_subclasses/functional_tensor.py:307: UserWarning: Failed to initialize NumPy: No module named 'numpy'
W1130 21:47:46.148000 15484 torch/utils/cpp_extension.py:140] No CUDA runtime is found, using CUDA_HOME='/usr/local'


torch.__version__  = 2.11.0+cu130
In file included from /venv/lib/python3.10/site-packages/torch/include/c10/cuda/CUDAGuard.h:8,
                 from /tmp/fa/flash_attn-2.8.3/csrc/flash_attn/flash_api.cpp:8:
/venv/lib/python3.10/site-packages/torch/include/c10/cuda/CUDAMiscFunctions.h:7:10: fatal error: cuda_runtime.h: No such file or directory
    7 | #include <cuda_runtime.h>
      |          ^~~~~~~~~~~~~~~~
compilation terminated.
ninja: build stopped: subcommand failed.
subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '1']' returned non-zero exit status 1.
RuntimeError: Error compiling objects for extension
"""

NO_NVCC = """\
      torch.__version__  = 2.1.2+cu118


      /tmp/pip-install-ab12cd/flash-attn_5c1e/setup.py:79: UserWarning: flash_attn was requested, but nvcc was not found.  Are you sure your environment has nvcc available?  If you're installing within a container from https://hub.docker.com/r/pytorch/pytorch, only images whose names contain 'devel' will provide nvcc.
        warnings.warn(
      Traceback (most recent call last):
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 1076, in CUDAExtension
          library_dirs += library_paths(cuda=True)
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 1203, in library_paths
          if (not os.path.exists(_join_cuda_home(lib_dir)) and
        File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/cpp_extension.py", line 2416, in _join_cuda_home
          raise OSError('CUDA_HOME environment variable is not set. '
      OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.
"""

NO_GCC = """\
      running build_ext
      building 'psutil._psutil_linux' extension
      creating build/temp.linux-x86_64-cpython-310/psutil
      x86_64-linux-gnu-gcc -Wno-unused-result -Wsign-compare -DNDEBUG -g -fwrapv -O2 -Wall -fPIC -I/usr/include/python3.10 -c psutil/_psutil_common.c -o build/temp.linux-x86_64-cpython-310/psutil/_psutil_common.o
      error: command 'x86_64-linux-gnu-gcc' failed: No such file or directory
      [end of output]
"""

TRITON_NO_CC = """\
(WorkerDict pid=5120)   File "/home/ops/verl/lib/python3.10/site-packages/triton/common/build.py", line 81, in _build
(WorkerDict pid=5120)     raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")
(WorkerDict pid=5120) RuntimeError: Failed to find C compiler. Please specify via CC environment variable.
"""

OLD_DRIVER = """\
$ python -c "import torch; print(torch.cuda.is_available())"
/home/ops/verl/lib/python3.10/site-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA driver. (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)
  return torch._C._cuda_getDeviceCount() > 0
False
"""

DRIVER_INSUFFICIENT = """\
INFO 05-14 11:40:02 llm_engine.py:87] Initializing an LLM engine with config: model='/data/models/Qwen2-7B-Instruct', dtype=torch.bfloat16
RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version
"""

NO_KERNEL_IMAGE = """\
/home/ops/verl/lib/python3.10/site-packages/torch/cuda/__init__.py:173: UserWarning:
NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.
The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_37 sm_90.
RuntimeError: CUDA error: no kernel image is available for execution on the device
"""

FLASH_ABI = """\
  File "/home/ops/verl/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 10, in <module>
    import flash_attn_2_cuda as flash_attn_cuda
ImportError: /home/ops/verl/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi
"""

BUILD_ISOLATION = """\
Collecting flash-attn==2.5.8
  Using cached flash_attn-2.5.8.tar.gz (2.5 MB)
  Preparing metadata (setup.py) ... error
  error: subprocess-exited-with-error

  × python setup.py egg_info did not run successfully.
  │ exit code: 1
  ╰─> [6 lines of output]
      Traceback (most recent call last):
        File "<string>", line 2, in <module>
        File "<pip-setuptools-caller>", line 34, in <module>
        File "/tmp/pip-install-9x8y7z/flash-attn_0a1b2c/setup.py", line 19, in <module>
          import torch
      ModuleNotFoundError: No module named 'torch'
      [end of output]
"""

CUDA_OOM = """\
(WorkerDict pid=7733) [rank0]: Traceback (most recent call last):
(WorkerDict pid=7733) [rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacty of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.11 GiB memory in use. Of allocated memory 74.50 GiB is allocated by PyTorch, and 2.13 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
"""

# Multi-node failures, as NCCL, gloo, Ray and verl print them inside a Ray job's output.
NCCL_CLOSED = """\
(WorkerDict pid=48211, ip=10.0.0.6) node-2:48211:48911 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.6<0> [1]docker0:172.17.0.1<0>
(WorkerDict pid=48211, ip=10.0.0.6) node-2:48211:48911 [0] NCCL INFO Using network Socket
(WorkerDict pid=48211, ip=10.0.0.6) node-2:48211:48990 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer node-1<51159>
(WorkerDict pid=48211, ip=10.0.0.6) node-2:48211:48990 [0] NCCL INFO misc/socket.cc:749 -> 6
(WorkerDict pid=48211, ip=10.0.0.6) node-2:48211:48990 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x55a51966cc80
(WorkerDict pid=48211, ip=10.0.0.6) torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, remote process exited or there was a network error, NCCL version 2.18.1
"""

NCCL_IB = """\
node-1:2233:2290 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.5<0>
node-1:2233:2290 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.6<40021> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.5 remoteGids::ffff:10.0.0.6
node-1:2233:2290 [3] NCCL INFO transport/net.cc:1134 -> 6
"""

GLOO_CLOSED = """\
(WorkerDict pid=7781, ip=10.0.0.7)   File "/home/ops/verl/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050, in barrier
(WorkerDict pid=7781, ip=10.0.0.7)     work.wait()
(WorkerDict pid=7781, ip=10.0.0.7) RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.5]:40719
"""

RAY_GPUS_SHORT = """\
2025-05-14 10:02:11,201	INFO worker.py:1841 -- Connecting to existing Ray cluster at address: 10.0.0.5:6379...
2025-05-14 10:02:11,233	INFO worker.py:2012 -- Connected to Ray cluster.
Traceback (most recent call last):
  File "/home/ops/verl/lib/python3.10/site-packages/verl/trainer/main_ppo.py", line 64, in main
    run_ppo(config)
  File "/home/ops/verl/lib/python3.10/site-packages/verl/trainer/ppo/ray_trainer.py", line 190, in _check_resource_available
    raise ValueError(f"Total available GPUs {total_available_gpus} is less than total desired GPUs {total_required_gpus}")
ValueError: Total available GPUs 6.0 is less than total desired GPUs 16
"""

RAYLET_REGISTER = """\
2025-05-14 10:02:11,169	INFO worker.py:1841 -- Started a local Ray instance.
[2025-05-14 10:02:41,421 E 759 759] core_worker.cc:496: Failed to register worker to Raylet: IOError: [RayletClient] Unable to register worker with raylet. Failed to read data from the socket: End of file worker_id=01000000ffffffffffffffffffffffffffffffffffffffffffffffff
"""

RAYLET_REGISTER_OLD = """\
[2023-09-13 02:28:19,539 E 119771 119771] core_worker.cc:201: Failed to register worker 01000000ffffffffffffffffffffffffffffffffffffffffffffffff to Raylet. IOError: [RayletClient] Unable to register worker with raylet. No such file or directory
"""

TOO_MANY_FILES = """\
(TaskRunner pid=5120) Traceback (most recent call last):
(TaskRunner pid=5120)   File "/home/ops/verl/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
(TaskRunner pid=5120)     data = self._data_queue.get(timeout=timeout)
(TaskRunner pid=5120) OSError: [Errno 24] Too many open files
"""


# A successful install and the start of a run: plenty of words that signatures look for, in
# harmless places.
CLEAN = """\
==> [5/7] phase torch
Looking in links: /opt/verl-bundle/wheels
Processing /opt/verl-bundle/wheels/torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl
Installing collected packages: mpmath, typing-extensions, sympy, networkx, MarkupSafe, fsspec, filelock, triton, jinja2, torch
Successfully installed MarkupSafe-2.1.5 filelock-3.13.1 fsspec-2024.2.0 jinja2-3.1.3 mpmath-1.3.0 networkx-3.2.1 sympy-1.12 torch-2.1.2+cu118 triton-2.1.0 typing-extensions-4.9.0
==> [5/7] phase flash-attn: building on this server (MAX_JOBS=4; FLASH_ATTENTION_FORCE_BUILD=TRUE)
Processing /opt/verl-bundle/sources/flash_attn-2.5.8.tar.gz
  Preparing metadata (setup.py): started
  Preparing metadata (setup.py): finished with status 'done'
Building wheels for collected packages: flash-attn
  Building wheel for flash-attn (setup.py): started
  Building wheel for flash-attn (setup.py): finished with status 'done'
  Created wheel for flash-attn: filename=flash_attn-2.5.8-cp310-cp310-linux_x86_64.whl size=120616320 sha256=7b1c3e
Successfully built flash-attn
Successfully installed flash-attn-2.5.8
==> [6/7] post-install checks
ok   import torch 2.1.2+cu118 (CUDA 11.8, cxx11abi False)
ok   import flash_attn 2.5.8
==> [7/7] done: source /home/ops/verl/bin/activate
trainer:
  n_gpus_per_node: 8
  nnodes: 1
  save_freq: -1
  test_freq: 10
actor_rollout_ref:
  nccl_timeout: 600
  rollout:
    gpu_memory_utilization: 0.4
    timeout: 1800
ray_init:
  num_cpus: null
[I ProcessGroupNCCL.cpp:686] [Rank 0] ProcessGroupNCCL initialization options:NCCL_ASYNC_ERROR_HANDLING: 1, NCCL_DESYNC_DEBUG: 0, NCCL_ENABLE_TIMING: 0, NCCL_BLOCKING_WAIT: 0, TIMEOUT(ms): 1800000, USE_HIGH_PRIORITY_STREAM: 0
UserWarning: The detected CUDA version (11.7) has a minor version mismatch with the version that was used to compile PyTorch (11.8). Most likely this shouldn't be a problem.
Guessing wheel URL:  https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.8/flash_attn-2.5.8+cu118torch2.1cxx11abiFALSE-cp310-cp310-linux_x86_64.whl
Precompiled wheel not found. Building from source...
step:1 - actor/entropy_loss:1.21 - timing_s/step:95.3 - critic/score/mean:0.12
"""


def line_of(log: str, marker: str) -> int:
    """The 1-based number of the first line of `log` holding `marker`."""
    for number, line in enumerate(log.split("\n"), 1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} is not in the log")


def by_id(findings: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in findings}


# id, log, the line the finding must point at, what the fix must tell, what the cause must say
# uv's own words when the venv's filesystem fills up in the middle of torch.
DISK_FULL = """\
Resolved 21 packages in 3ms
error: Failed to install: torch-2.1.2+cu118-cp310-cp310-linux_x86_64.whl (torch==2.1.2+cu118)
  Caused by: failed to write to file `/opt/verl/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so`: No space left on device (os error 28)
"""

CASES = [
    pytest.param(
        "no-matching-dist",
        PIP_NO_MATCH,
        "Could not find a version",
        ["--python"],
        ["torch==2.1.2+cu118"],
        id="pip-no-matching-dist",
    ),
    pytest.param(
        "no-matching-dist",
        UV_NOT_FOUND,
        "was not found in the provided package locations",
        ["--python"],
        ["tensordict"],
        id="uv-not-found",
    ),
    pytest.param(
        "python-headers",
        TRITON_PYTHON_H,
        "fatal error: Python.h",
        ["python3.10-dev", "python3-devel"],
        ["triton"],
        id="python-headers-triton",
    ),
    pytest.param(
        "python-headers",
        PSUTIL_PYTHON_H,
        "fatal error: Python.h",
        ["python3.11-dev"],
        [],
        id="python-headers-build",
    ),
    pytest.param(
        "libcuda-missing",
        LIBCUDA,
        "OSError: libcuda.so.1",
        ["nvidia-smi", "ldconfig", "NVIDIA Container Toolkit"],
        [],
        id="libcuda-missing",
    ),
    pytest.param(
        "libcuda-missing",
        TORCH_NO_DRIVER,
        "Found no NVIDIA driver",
        ["nvidia-smi"],
        [],
        id="torch-no-driver",
    ),
    pytest.param(
        "flash-attn-missing",
        FLASH_ATTN_MISSING,
        "No module named 'flash_attn'",
        ["import flash_attn", "FLASH_ATTENTION_SKIP_CUDA_BUILD"],
        ["another venv"],
        id="flash-attn-missing",
    ),
    pytest.param(
        "flash-attn-missing",
        TRANSFORMERS_NO_FLASH,
        "following error: the package flash_attn",
        ["FLASH_ATTENTION_SKIP_CUDA_BUILD"],
        [],
        id="flash-attn-missing-transformers",
    ),
    pytest.param(
        "nvcc-gcc",
        NVCC_GCC,
        "host_config.h:132:2: error",
        ["gcc-11", "CC=gcc-11", "CUDAHOSTCXX", "NVCC_CCBIN", "-allow-unsupported-compiler"],
        ["CUDA 11.8 accepts gcc <= 11"],
        id="nvcc-gcc-cuda118",
    ),
    pytest.param(
        "nvcc-gcc",
        NVCC_GCC_CUDA121,
        "host_config.h:143:2: error",
        ["gcc-12 g++-12"],
        [],
        id="nvcc-gcc-cuda121",
    ),
    pytest.param(
        "nvcc-gcc",
        TORCH_GCC_CHECK,
        "RuntimeError: The current installed version of g++",
        ["gcc-11 g++-11"],
        [],
        id="nvcc-gcc-torch-check",
    ),
    pytest.param(
        "cuda-mismatch",
        CUDA_MISMATCH,
        "The detected CUDA version (12.2)",
        ["export CUDA_HOME=/usr/local/cuda-11.8", "PATH=$CUDA_HOME/bin:$PATH"],
        ["CUDA 12.2", "CUDA 11.8"],
        id="cuda-mismatch",
    ),
    pytest.param(
        "flash-attn-download",
        FLASH_DOWNLOAD,
        "socket.gaierror",
        ["FLASH_ATTENTION_FORCE_BUILD=TRUE", "prebuilt wheel"],
        ["GitHub"],
        id="flash-attn-download",
    ),
    pytest.param(
        "network-access",
        PIP_OFFLINE_INDEX,
        "Failed to establish a new connection",
        ["PIP_INDEX_URL", "--no-index"],
        [],
        id="network-access",
    ),
    pytest.param(
        "invalid-ordinal",
        INVALID_ORDINAL,
        "invalid device ordinal",
        ["CUDA_VISIBLE_DEVICES", "trainer.n_gpus_per_node", "verl-bundle doctor"],
        ["CUDA_VISIBLE_DEVICES=3,1"],
        id="invalid-ordinal",
    ),
    pytest.param(
        "device-mismatch",
        DEVICE_MISMATCH,
        "Expected all tensors",
        ["torch.cuda.set_device", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"],
        ["cuda:1 and cuda:0"],
        id="device-mismatch",
    ),
    pytest.param(
        "nccl-timeout",
        NCCL_WATCHDOG,
        "Watchdog caught collective operation timeout",
        ["NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "MASTER_PORT"],
        [],
        id="nccl-watchdog",
    ),
    pytest.param(
        "nccl-timeout",
        NCCL_RENDEZVOUS,
        "[c10d] The client socket has failed to connect",
        ["every rank started"],
        [],
        id="nccl-rendezvous",
    ),
    pytest.param(
        "unsupported-wheel",
        UNSUPPORTED_WHEEL,
        "is not a supported wheel",
        ["bundle's own pip", "--python"],
        ["cp310", "pip >= 20.3", "pip >= 19.3"],
        id="unsupported-wheel",
    ),
    pytest.param(
        "oom-build",
        OOM_CICC,
        "'cicc' died due to signal 9",
        ["MAX_JOBS=2", "swap"],
        ["several GB"],
        id="oom-build-cicc",
    ),
    pytest.param(
        "oom-build", OOM_CC1PLUS, "Killed signal terminated", ["MAX_JOBS"], [], id="oom-cc1plus"
    ),
    pytest.param(
        "oom-build", OOM_BARE_KILLED, "      Killed", ["MAX_JOBS"], [], id="oom-bare-killed"
    ),
    pytest.param(
        "hash-mismatch",
        PIP_HASHES,
        "DO NOT MATCH THE HASHES",
        ["verify", "sha256sum -c SHA256SUMS"],
        ["damaged"],
        id="pip-hash-mismatch",
    ),
    pytest.param(
        "hash-mismatch", UV_HASHES, "Hash mismatch for", ["verify"], [], id="uv-hash-mismatch"
    ),
    pytest.param(
        "externally-managed",
        PEP668,
        "error: externally-managed-environment",
        ["venv", "--break-system-packages"],
        ["PEP 668"],
        id="externally-managed",
    ),
    pytest.param(
        "venv-missing",
        NO_ENSUREPIP,
        "because ensurepip is not",
        ["apt install python3.10-venv"],
        [],
        id="venv-missing",
    ),
    pytest.param(
        "cuda-home-not-toolkit",
        WRAPPER_CUDA_HOME,
        "using CUDA_HOME='/usr/local'",
        ["CUDA_HOME=/usr/local/cuda-X.Y", "_HERE_"],
        ["wrapper"],
        id="cuda-home-not-toolkit",
    ),
    pytest.param(
        "cuda-home-missing",
        NO_NVCC,
        "but nvcc was not found",
        ["CUDA_HOME", "nvcc --version"],
        ["toolkit"],
        id="cuda-home-missing",
    ),
    pytest.param(
        "compiler-missing",
        NO_GCC,
        "error: command 'x86_64-linux-gnu-gcc' failed",
        ["build-essential", "gcc-c++"],
        [],
        id="compiler-missing",
    ),
    pytest.param(
        "compiler-missing",
        TRITON_NO_CC,
        "RuntimeError: Failed to find C compiler",
        ["CC="],
        ["triton"],
        id="compiler-missing-triton",
    ),
    pytest.param(
        "driver-too-old",
        OLD_DRIVER,
        "driver on your system is too old",
        ["nvidia-smi", "520.61.05"],
        ["supports CUDA up to 11.4"],
        id="driver-too-old",
    ),
    pytest.param(
        "driver-too-old",
        DRIVER_INSUFFICIENT,
        "driver version is insufficient",
        ["525.60.13"],
        [],
        id="driver-insufficient",
    ),
    pytest.param(
        "no-kernel-image",
        NO_KERNEL_IMAGE,
        "sm_120 is not compatible",
        ["TORCH_CUDA_ARCH_LIST", "compute_cap"],
        ["sm_80"],
        id="no-kernel-image",
    ),
    pytest.param(
        "flash-attn-abi",
        FLASH_ABI,
        "undefined symbol",
        ["--no-build-isolation", "FLASH_ATTENTION_FORCE_BUILD=TRUE"],
        ["another torch"],
        id="flash-attn-abi",
    ),
    pytest.param(
        "build-isolation",
        BUILD_ISOLATION,
        "No module named 'torch'",
        ["--no-build-isolation"],
        ["isolated build environment"],
        id="build-isolation",
    ),
    pytest.param(
        "nccl-network",
        NCCL_CLOSED,
        "NCCL WARN socketProgress: Connection closed by remote peer",
        ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE=1"],
        ["interface"],
        id="nccl-connection-closed",
    ),
    pytest.param(
        "nccl-network",
        NCCL_IB,
        "NCCL WARN NET/IB : Got completion from peer",
        ["NCCL_IB_HCA", "ibv_devinfo"],
        ["InfiniBand"],
        id="nccl-ib-completion-error",
    ),
    pytest.param(
        "nccl-network",
        GLOO_CLOSED,
        "Connection closed by peer [10.0.0.5]",
        ["GLOO_SOCKET_IFNAME"],
        ["gloo"],
        id="gloo-connection-closed",
    ),
    pytest.param(
        "ray-gpus-short",
        RAY_GPUS_SHORT,
        "ValueError: Total available GPUs 6.0",
        ["trainer.n_gpus_per_node", "CUDA_VISIBLE_DEVICES", "ray status"],
        ["16 GPUs", "found 6.0", "CUDA_VISIBLE_DEVICES"],
        id="ray-gpus-short",
    ),
    pytest.param(
        "ray-raylet-register",
        RAYLET_REGISTER,
        "Failed to register worker to Raylet",
        ["raylet.out", "ray_init.num_cpus", "ulimit -n"],
        ["raylet"],
        id="ray-raylet-register",
    ),
    pytest.param(
        "ray-raylet-register",
        RAYLET_REGISTER_OLD,
        "Failed to register worker 01000000",
        ["--num-cpus"],
        [],
        id="ray-raylet-register-old",
    ),
    pytest.param(
        "too-many-open-files",
        TOO_MANY_FILES,
        "OSError: [Errno 24] Too many open files",
        ["ulimit -n 65536", "limits.conf", "--propagate"],
        ["ulimit -n"],
        id="too-many-open-files",
    ),
    pytest.param(
        "cuda-oom",
        CUDA_OOM,
        "CUDA out of memory",
        ["gpu_memory_utilization", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"],
        [],
        id="cuda-oom",
    ),
    pytest.param(
        "disk-full",
        DISK_FULL,
        "No space left on device",
        ["/opt/verl/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so", "--prefix DIR"],
        ["errno 28"],
        id="disk-full",
    ),
]


@pytest.mark.parametrize(("sig_id", "log", "marker", "fix_has", "cause_has"), CASES)
def test_signature(
    sig_id: str, log: str, marker: str, fix_has: list[str], cause_has: list[str]
) -> None:
    """Each snippet, wrapped in unrelated noise, yields its cause at the right line."""
    text = CLEAN + log + "[end of phase]\n"
    found = by_id(explain_text(text))
    assert sig_id in found, [f.id for f in found.values()]
    finding = found[sig_id]
    assert finding.line == line_of(text, marker)
    assert marker.strip() in finding.evidence
    assert finding.evidence == finding.evidence.strip()
    for words in fix_has:
        assert words in finding.fix
    for words in cause_has:
        assert words in finding.cause
    assert "{" not in finding.cause + finding.fix, "a placeholder was left unfilled"


def test_every_signature_has_a_real_log() -> None:
    ids = [s.id for s in signatures.SIGNATURES]
    assert len(ids) == len(set(ids))
    assert {str(case.values[0]) for case in CASES} == set(ids)


def test_clean_install_and_run_log_has_no_finding() -> None:
    assert explain_text(CLEAN) == []


def test_unknown_log_is_said_honestly_with_its_tail() -> None:
    text = "".join(f"[{i:03d}] compiling unit {i}\n" for i in range(1, 41)) + "exit status 3\n"
    assert explain_text(text) == []
    rendered = render_text([], text)
    first, *rest, blank, last = rendered.split("\n")
    assert "no known cause for this log" in first
    assert [line.strip() for line in rest] == text.strip().split("\n")[-20:]
    assert blank == "" and last == "explain: no known cause in this log"  # the verdict, last
    doc = render_json([], text)
    result = {"known": False, "findings": [], "tail": text.strip().split("\n")[-20:]}
    verdict = {"code": 1, "state": "unexplained", "line": last, "ok": False}
    assert doc == {
        "schema": 1,
        "command": "explain",
        "ok": False,
        "result": result,
        "verdict": verdict,
    }


@pytest.mark.parametrize("kind", ["binary", "one endless line"])
def test_a_hostile_log_prints_a_bounded_answer(tmp_path: Path, kind: str) -> None:
    """Binary junk, or a log that is one 20 MB line: the answer stays small, no traceback."""
    log = tmp_path / "x.log"
    if kind == "binary":
        log.write_bytes(os.urandom(8 << 20))
    else:
        log.write_bytes(b"building " + b"#" * (20 << 20) + b"\nend " + b"=" * (1 << 20))
    proc = subprocess.run(
        [sys.executable, "-m", "verl_bundle.airgap", "explain", str(log)],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        check=False,
    )
    assert b"Traceback" not in proc.stderr
    assert len(proc.stdout) < 4096, len(proc.stdout)
    text = proc.stdout.decode()
    if kind == "binary":  # refused from its first block, in one line (exit 2)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.decode().startswith(f"explain: {log} is a binary file (it holds NUL")
        assert len(proc.stderr.decode().splitlines()) == 1
    else:
        assert proc.returncode == 1
        lines = text.splitlines()
        assert (
            lines[1]
            == "    building " + "#" * 291 + f" ... ({(20 << 20) + 9 - 300} more characters)"
        )
        assert lines[2].endswith(f" ... ({(1 << 20) + 4 - 300} more characters)")


def test_tail_of_a_short_log_and_of_progress_lines() -> None:
    assert explain.tail("") == []
    assert explain.tail("one\ntwo") == ["one", "two"]
    # A progress bar rewrites its line with \r: the tail shows what a terminal would.
    assert explain.tail("a\n 10%\r 50%\r100%\r\n\x1b[31mdone\x1b[0m\n\n") == ["a", "100%", "done"]


def test_two_causes_are_reported_most_specific_first() -> None:
    """An oom-killed build leaves flash_attn missing: the root cause comes first."""
    text = OOM_CICC + "ERROR: Failed building wheel for flash-attn\n" + FLASH_ATTN_MISSING
    ids = [f.id for f in explain_text(text)]
    assert ids == ["oom-build", "flash-attn-missing"]
    # Failed index lookups make pip report "no matching distribution": network comes first.
    assert [f.id for f in explain_text(PIP_OFFLINE_INDEX)] == ["network-access", "no-matching-dist"]


def test_same_cause_twice_is_reported_once_at_its_first_line() -> None:
    text = NCCL_WATCHDOG + "noise\n" + NCCL_WATCHDOG
    findings = explain_text(text)
    assert [f.id for f in findings] == ["nccl-timeout"]
    assert findings[0].line == line_of(text, "Watchdog caught")


def test_flash_attn_download_is_not_also_a_generic_network_finding() -> None:
    ids = [f.id for f in explain_text(FLASH_DOWNLOAD)]
    assert ids == ["flash-attn-download"]
    # The same DNS error far from any flash-attn build is the generic finding.
    far = FLASH_DOWNLOAD + "x" * 100 + "\n" * 3000 + PIP_OFFLINE_INDEX
    ids = [f.id for f in explain_text(far)]
    assert ids[:2] == ["flash-attn-download", "network-access"]


def test_near_misses_are_not_findings() -> None:
    near_misses = "\n".join(
        [
            # torch only warns about a minor CUDA difference
            "UserWarning: The detected CUDA version (11.7) has a minor version mismatch with the "
            "version that was used to compile PyTorch (11.8). Most likely this shouldn't be a "
            "problem.",
            # a process killed far from any build
            "step:40 - actor/pg_loss:0.1",
            "Killed",
            # a GPU OOM is not a build OOM, and flash_attn_2_cuda loading is not a missing module
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "from flash_attn_2_cuda import fwd  # ok",
            "No module named 'torchvision'",
            "Requirement already satisfied: urllib3 in ./lib/python3.10/site-packages",
        ]
    )
    assert explain_text(near_misses) == []


def test_evidence_is_trimmed_around_the_match() -> None:
    long_line = "\x1b[31m" + "x" * 5000 + " RuntimeError: CUDA error: invalid device ordinal\x1b[0m"
    [finding] = explain_text("start\n" + long_line + "\n")
    assert finding.line == 2
    assert "invalid device ordinal" in finding.evidence
    assert finding.evidence.startswith("...")
    assert len(finding.evidence) <= explain.EVIDENCE_CHARS + 6
    assert "\x1b" not in finding.evidence


def test_crlf_and_progress_lines_keep_line_numbers() -> None:
    text = "a\r\nb\r\n 12%\r 99%\rRuntimeError: CUDA error: invalid device ordinal\r\nc\r\n"
    [finding] = explain_text(text)
    assert finding.line == 3
    assert finding.evidence == "RuntimeError: CUDA error: invalid device ordinal"


def test_finding_is_frozen() -> None:
    [finding] = explain_text(DEVICE_MISMATCH)
    with pytest.raises(FrozenInstanceError):
        finding.line = 1  # type: ignore[misc]


def test_render_text_shows_cause_fix_and_line() -> None:
    text = NVCC_GCC
    rendered = render_text(explain_text(text), text)
    lines = rendered.split("\n")
    assert lines[0] == "explain: 1 known cause in this log, most specific first"
    assert lines[2] == "1. nvcc rejects this gcc version [nvcc-gcc]"
    assert lines[3].startswith("   cause: The host gcc is newer")
    assert lines[4].startswith("   fix: Install a supported gcc")
    assert lines[5].startswith(f"   seen at line {line_of(text, 'host_config.h:132')}: ")


def test_render_json_shape_is_pinned() -> None:
    text = OOM_CC1PLUS + FLASH_ATTN_MISSING
    envelope = render_json(explain_text(text), text)
    assert envelope["schema"] == 1 and envelope["command"] == "explain"
    assert envelope["ok"] is True
    doc = envelope["result"]
    assert sorted(doc) == ["findings", "known", "tail"]
    assert doc["known"] is True
    assert [f["id"] for f in doc["findings"]] == ["oom-build", "flash-attn-missing"]
    for f in doc["findings"]:
        assert sorted(f) == ["cause", "evidence", "fix", "id", "line", "title"]
        assert isinstance(f["line"], int)
        assert all(isinstance(f[k], str) for k in ("cause", "evidence", "fix", "id", "title"))
    assert doc["tail"] == text.rstrip("\n").split("\n")[-20:]
    json.dumps(envelope)


def test_main_exit_codes_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    known = tmp_path / "phase-flash-attn.log"
    known.write_text(CLEAN + OOM_CICC, encoding="utf-8")
    unknown = tmp_path / "phase-base.log"
    unknown.write_text(CLEAN, encoding="utf-8")

    assert cli_main(["explain", str(known)]) == 0
    out = capsys.readouterr().out
    assert "[oom-build]" in out and "MAX_JOBS" in out

    assert cli_main(["explain", str(known), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "explain" and doc["ok"] is True
    assert doc["result"]["known"] is True and doc["result"]["findings"][0]["id"] == "oom-build"

    assert cli_main(["explain", str(unknown)]) == 1
    assert "no known cause for this log" in capsys.readouterr().out

    assert cli_main(["explain", str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert err == [f"explain: {tmp_path / 'missing.log'}: No such file or directory"]

    assert cli_main(["explain"]) == 2
    assert cli_main(["explain", str(known), "--bogus"]) == 2
    assert cli_main(["explain", "--help"]) == 0
    assert "LOGFILE" in capsys.readouterr().out

    # `-` reads standard input, undecodable bytes included.
    stdin = io.TextIOWrapper(io.BytesIO(b"\xff\xfe junk\n" + UNSUPPORTED_WHEEL.encode()))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert cli_main(["explain", "-", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["id"] for f in doc["result"]["findings"]] == ["unsupported-wheel"]


def test_large_log_finds_the_failure_at_its_end() -> None:
    """A 50 MB build log (noise, then the failure): the cause and its line are still found.
    (How long it takes is for a benchmark, not for an assertion here.)"""
    noise = (
        f"      [12/49] {_NVCC_CMD}\n"
        "NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7\n"
        "Processing /opt/verl-bundle/wheels/typing_extensions-4.9.0-py3-none-any.whl\n"
    )
    text = noise * (50_000_000 // len(noise) + 1) + OOM_CC1PLUS
    assert len(text) >= 50_000_000
    findings = explain_text(text)
    assert [f.id for f in findings] == ["oom-build"]
    assert findings[0].line == text.count("\n", 0, text.index("c++: fatal error")) + 1


@pytest.mark.skipif(not PY38.exists(), reason=f"{PY38} (the oldest server python) is absent")
def test_runs_on_python38_as_install_sh_calls_it(tmp_path: Path) -> None:
    """The server's python3 may be 3.8: every real log gives there what it gives here."""
    text = CLEAN + "\n".join(str(case.values[1]) for case in CASES)
    log = tmp_path / "phase-flash-attn.log"
    log.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env["PYTHONPATH"] = str(ROOT)
    cmd = [str(PY38), "-m", "verl_bundle.airgap", "explain", str(log), "--json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc == render_json(explain_text(text), text)
    assert {f["id"] for f in doc["result"]["findings"]} == {s.id for s in signatures.SIGNATURES}

    log.write_text(CLEAN, encoding="utf-8")
    done = subprocess.run(
        cmd[:-1], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "no known cause for this log" in done.stdout

    done = subprocess.run(
        [*cmd[:-2], str(tmp_path / "nope.log")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"explain: {tmp_path / 'nope.log'}: No such file or directory"


# -- the table: every signature proves itself on its own sample --------------------------------


def _required_runs(pattern: str) -> list[str]:
    """The literal runs every match of `pattern` holds, read from Python's own regex parser: an
    oracle for the needles that explain derives with its small reader of pattern text."""
    parser: Any = importlib.import_module("re._parser")
    parsed = parser.parse(pattern, re.MULTILINE)
    assert not parsed.state.flags & re.IGNORECASE, "needles are found case-sensitively"
    runs: list[str] = []
    run: list[str] = []
    for op, av in parsed:
        if str(op) == "LITERAL":
            run.append(chr(av))
            continue
        if str(op) in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, items = av[0], list(av[2])
            if low >= 1 and len(items) == 1 and str(items[0][0]) == "LITERAL":
                run.append(chr(items[0][1]))
        runs.append("".join(run))
        run = []
    runs.append("".join(run))
    return [r for r in runs if r]


@pytest.mark.parametrize("sig", signatures.SIGNATURES, ids=lambda s: s.id)
def test_signature_sample_names_it_first_and_needles_agree(sig: signatures.Signature) -> None:
    """Each signature's sample (real tool output) is explained, with that signature first; each
    needle is a literal that Python's parser says every match of its pattern holds; and the
    sample's match holds its needle."""
    findings = explain_text(sig.sample + "\n")
    assert findings, f"{sig.id}: its sample matches nothing"
    assert findings[0].id == sig.id, [f.id for f in findings]
    matched = False
    for alt in sig.alternatives:
        assert any(alt.needle in run for run in _required_runs(alt.pattern.pattern)), alt
        for m in alt.pattern.finditer(sig.sample):
            matched = True
            assert alt.needle in m.group(), (alt.needle, m.group())
    assert matched


def test_every_signature_names_an_offline_fix_and_a_known_context() -> None:
    for sig in signatures.SIGNATURES:
        assert sig.title and sig.cause and sig.fix, sig.id
        assert sig.context_rule is None or sig.context_rule.split(":")[0] in (
            "near",
            "inside",
            "outside",
        )
    # Nothing the table suggests downloads anything: the server has no network.
    for sig in signatures.SIGNATURES:
        assert "pip install flash-attn" not in sig.fix and "curl " not in sig.fix, sig.id


@pytest.mark.parametrize(
    ("pattern", "runs"),
    [
        ("colou?r", ["colo", "r"]),
        ("ab+c", ["ab", "c"]),
        ("x{0,2}yz{2}w", ["yz", "w"]),
        (r"x\.y[a\]b]z", ["x.y", "z"]),
        ("(?i:abc)def(?:g|h)*ij", ["def", "ij"]),
        (r"\bKilled\b", ["Killed"]),
        (r"(?:^|[\s:])Killed\b", ["Killed"]),
        (r"a\d+b.c", ["a", "b", "c"]),
        ("(?m)start$", ["start"]),
        (r"lazy.*?end{1,}?", ["lazy", "end"]),
    ],
)
def test_needles_are_the_literals_every_match_holds(pattern: str, runs: list[str]) -> None:
    assert signatures.literal_runs(pattern) == runs
    assert signatures.literal_runs(pattern) == _required_runs(pattern)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"patterns": ["a|b"]}, "top-level '|'"),
        ({"patterns": ["(?i)timed out"]}, "global (?i)"),
        ({"patterns": [r"\d+ GB"]}, "no literal of 4 characters"),
        ({"patterns": ["Killed"], "context": "near:nowhere"}, "unknown context rule"),
        ({"patterns": ["Killed"], "cause": "{gpu} died"}, "placeholder {gpu} needs a default"),
        (
            {"patterns": ["Killed"], "values": [{"pattern": "(?P<n>\\d+)", "set": {"m": "{n:x}"}}]},
            "unknown transform 'x'",
        ),
    ],
)
def test_a_broken_table_is_refused_naming_the_signature(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    base = {"id": "broken-one", "title": "t", "cause": "c", "fix": "f", "sample": "s"}
    doc = {"near": {}, "sections": {}, "signatures": [{**base, **entry}]}
    path = tmp_path / "signatures.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match="signature 'broken-one'") as info:
        signatures.load_signatures(path)
    assert message in str(info.value)


# -- multi-node failures -------------------------------------------------------------------------


def test_root_causes_of_multi_node_failures_come_first() -> None:
    """A node out of file descriptors kills its raylet; a closed NCCL connection ends in the
    watchdog's timeout: the root cause is named first."""
    text = TOO_MANY_FILES + RAYLET_REGISTER + NCCL_CLOSED + NCCL_WATCHDOG
    assert [f.id for f in explain_text(text)] == [
        "too-many-open-files",
        "ray-raylet-register",
        "nccl-network",
        "nccl-timeout",
    ]


def test_ray_gpu_shortfall_names_the_numbers_or_says_so() -> None:
    [finding] = explain_text(RAY_GPUS_SHORT)
    assert "for 16 GPUs" in finding.cause and "found 6.0" in finding.cause
    # The raising source line alone (a traceback echo) is not the error.
    echo = RAY_GPUS_SHORT.rsplit("\n", 2)[0] + "\n"
    assert explain_text(echo) == []


# -- what reaches the terminal ---------------------------------------------------------------

HOSTILE = (
    "\x1b]0;owned title\x07\x1b[2J\x1b[H\n"
    "RuntimeError: CUDA error: invalid device ordinal\x1b[1A\x1b[2K\x9b31m\x07\n"
    "ERROR: torch-\x1b]2;x\x07-cp310-cp310-linux_x86_64.whl is not a supported wheel on this "
    "platform.\n"
    "\x1b[31mred\x1b[0m \x1b[5;10Hmoved\x00\x08\x7f\n"
)
_RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_control_sequences_from_a_log_are_shown_not_obeyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OSC title changes, cursor movement, C0/C1 controls: visible escapes in every output."""
    findings = explain_text(HOSTILE)
    assert [f.id for f in findings] == ["unsupported-wheel", "invalid-ordinal"]
    text = render_text(findings, HOSTILE)
    assert not _RAW_CONTROLS.search(text)
    assert "\\x1b]0;owned title\\x07" not in text  # that line is not shown: not the evidence
    assert "invalid device ordinal\\x1b[1A\\x1b[2K\\x9b31m\\x07" in text
    assert "torch-\\x1b]2;x\\x07-cp310" in text  # a value taken from the log, neutralised
    doc = render_json(findings, HOSTILE)
    for f in doc["result"]["findings"]:
        assert not _RAW_CONTROLS.search(f["evidence"])
    unknown = render_text([], HOSTILE)
    assert not _RAW_CONTROLS.search(unknown)
    assert "red \\x1b[5;10Hmoved\\x00\\x08\\x7f" in unknown  # colour dropped, the rest shown
    assert "\\x1b]0;owned title\\x07\\x1b[2J\\x1b[H" in unknown
    log = tmp_path / "hostile.log"
    log.write_text(HOSTILE, encoding="utf-8")
    assert cli_main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert not _RAW_CONTROLS.search(out) and "[invalid-ordinal]" in out


@pytest.mark.timeout(60)
def test_a_2mb_line_is_explained_whole() -> None:
    """One 2 MB line (a progress display without newlines, URLs and needles inside) ends with a
    failure: it is found, and the evidence is trimmed around it."""
    noise = "https://u:p@h/x " * 1000 + "Killed timed out step " * 2000 + "ab://" + "x" * 500_000
    line = noise * 4 + " RuntimeError: CUDA error: invalid device ordinal"
    assert len(line) > 2_000_000
    [finding] = explain_text("start\n" + line + "\nend\n")
    assert finding.id == "invalid-ordinal" and finding.line == 2
    assert finding.evidence.endswith("invalid device ordinal")
    assert len(finding.evidence) <= explain.EVIDENCE_CHARS + 6


def test_host_cli_gives_the_same_findings_in_one_envelope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`verl-bundle explain --json` and the server's explain print the same document; the text
    is neutralised there too."""
    log = tmp_path / "run.log"
    log.write_text(CLEAN + NCCL_CLOSED + HOSTILE, encoding="utf-8")
    result = run(["explain", str(log), "--json"], capsys)
    assert result.code == 0
    doc = json.loads(result.out)
    text = log.read_text(encoding="utf-8")
    assert doc == render_json(explain_text(text), text)
    assert "nccl-network" in [f["id"] for f in doc["result"]["findings"]]
    result = run(["explain", str(log)], capsys)
    assert result.code == 0 and "[nccl-network]" in result.out
    assert not _RAW_CONTROLS.search(result.out)


def test_disk_full_says_where_and_how_much() -> None:
    """The installer knows what the log does not: the bundle's installed size."""
    (found,) = [f for f in explain_text(DISK_FULL, {"need": "9.7 GB"}) if f.id == "disk-full"]
    assert "needs about 9.7 GB" in found.fix
    assert "df -h /opt/verl/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so" in found.fix
    # What the log says wins over what the caller knows.
    (alone,) = [f for f in explain_text(DISK_FULL) if f.id == "disk-full"]
    assert "installed size" in alone.fix


def _archives(tmp_path: Path) -> dict[str, Path]:
    """Real archives and binaries made with the standard library's own writers, each holding a
    log with known causes (so that, read as text, explain would "find" them)."""
    import gzip
    import tarfile
    import zipfile

    log = tmp_path / "install.log"
    log.write_text(UNSUPPORTED_WHEEL * 50)
    made = {}
    made["a tar archive"] = tmp_path / "bundle.tar"
    with tarfile.open(made["a tar archive"], "w") as tf:
        tf.add(log, "verl-bundle-x/install.log")
    made["a gzip file"] = tmp_path / "install.log.gz"
    made["a gzip file"].write_bytes(gzip.compress(log.read_bytes()))
    made["a zip archive (or a wheel)"] = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(made["a zip archive (or a wheel)"], "w") as zf:
        zf.write(log, "install.log")
    made["a zstd file"] = tmp_path / "install.log.zst"  # zstd's frame magic, then bytes
    made["a zstd file"].write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(64))
    made["a binary file (it holds NUL bytes)"] = tmp_path / "core"
    made["a binary file (it holds NUL bytes)"].write_bytes(b"\x7fELF\x02\x01\x01\0" + b"\0" * 64)
    return made


def test_explain_refuses_an_archive_or_binary_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: given the bundle's tarball, explain ran 7 minutes and reported its own
    signature samples as 29 causes. Now: one line, exit 2, on both sides."""
    for what, path in _archives(tmp_path).items():
        assert cli_main(["explain", str(path)]) == 2, what
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0] == (
            f"explain: {path} is {what}, not a log; give the failed command's output or log "
            "(install.sh writes PREFIX/.verl-bundle/install.log and phase-NAME.log there)"
        ), err
        host = run(["explain", str(path)], capsys)
        assert host.code == 2 and "Traceback" not in host.err
        assert host.err.strip().splitlines()[-1] == f"error: {err[0]}"


def test_explain_reads_only_the_first_block_of_what_it_refuses(tmp_path: Path) -> None:
    """A FIFO stands for a huge file: the writer gives one block (a tar header) and keeps the
    pipe open; explain must answer from that block alone, never waiting for the rest."""
    import tarfile

    fifo = tmp_path / "huge.tar"
    os.mkfifo(fifo)
    header = tarfile.TarInfo("verl-bundle-x/wheels/torch.whl")
    header.size = 10**10
    block = header.tobuf(tarfile.GNU_FORMAT)
    assert len(block) == 512
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_bundle.airgap", "explain", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with fifo.open("wb") as writer:
        writer.write(block + b"\0" * (explain.HEAD - len(block)))
        writer.flush()
        out, err = proc.communicate(timeout=120)  # the writer is still open here
    assert proc.returncode == 2, out + err
    assert f"explain: {fifo} is a tar archive, not a log" in err


def test_a_text_log_longer_than_a_block_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_text("x" * (explain.HEAD * 3) + "\n" + UNSUPPORTED_WHEEL)
    assert [f.id for f in explain_text(explain.read_log(str(log)))] == ["unsupported-wheel"]
