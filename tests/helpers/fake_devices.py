"""Fake OpenCL devices as their runtimes describe themselves (values from their clinfo output):
``DeviceInfo``s for tests of what pyrnn_cl derives from a device's queries, on machines that
have none of these devices (tests/test_tuning.py, tests/test_gpu_defaults.py)."""

from __future__ import annotations

from pyrnn_cl.devices import DeviceInfo


def _info(platform, name, type_, **kw):
    return DeviceInfo(platform_name=platform, platform_vendor=kw.pop("platform_vendor", platform),
                      name=name, type=type_, opencl_c_version="OpenCL C 1.2",
                      driver_version=kw.pop("driver_version", "1.0"), **kw)


NVIDIA_H100 = _info("NVIDIA CUDA", "NVIDIA H100 80GB HBM3", "gpu",
                    platform_vendor="NVIDIA Corporation", compute_units=132,
                    max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64),
                    local_mem_size=49152, local_mem_type="local", native_vector_width_float=1,
                    simd_widths=(32,), registers_per_group=65536)
AMD_MI = _info("AMD Accelerated Parallel Processing", "gfx90a:sramecc+:xnack-", "gpu",
               platform_vendor="Advanced Micro Devices, Inc.", compute_units=104,
               max_work_group_size=256, max_work_item_sizes=(1024, 1024, 1024),
               local_mem_size=65536, local_mem_type="local", native_vector_width_float=1,
               simd_widths=(64,))
APPLE_M2 = _info("Apple", "Apple M2 Max", "gpu", compute_units=38, max_work_group_size=256,
                 max_work_item_sizes=(256, 256, 256), local_mem_size=32768,
                 local_mem_type="local", native_vector_width_float=1)
INTEL_ARC = _info("Intel(R) OpenCL Graphics", "Intel(R) Arc(TM) A770 Graphics", "gpu",
                  platform_vendor="Intel(R) Corporation", compute_units=512,
                  max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 1024),
                  local_mem_size=65536, local_mem_type="local", native_vector_width_float=1,
                  simd_widths=(8, 16, 32))
TINY_GPU = _info("Some GPU runtime", "Tiny GPU", "gpu", max_work_group_size=64,
                 max_work_item_sizes=(32, 32, 32), native_vector_width_float=4,
                 registers_per_group=2048, simd_widths=(16,))
_POCL = dict(platform_vendor="The pocl project", compute_units=2, max_work_group_size=4096,
             max_work_item_sizes=(4096, 4096, 4096), local_mem_size=524288,
             local_mem_type="global", global_mem_cache_size=32 << 20,
             platform_version="OpenCL 3.0 PoCL 3.1+debian  Linux")
AVX2_CPU = _info("Portable Computing Language", "pthread-haswell-AMD EPYC", "cpu",
                 native_vector_width_float=8, native_vector_width_double=4, **_POCL)
AVX512_CPU = _info("Portable Computing Language", "pthread-znver4-AMD EPYC", "cpu",
                   native_vector_width_float=16, native_vector_width_double=8, **_POCL)
NEON_CPU = _info("Portable Computing Language", "pthread-neoverse-n1", "cpu",
                 native_vector_width_float=4, native_vector_width_double=2,
                 **dict(_POCL, global_mem_cache_size=1 << 20))
INTEL_CPU_RT = _info("Intel(R) OpenCL", "AMD EPYC", "cpu",
                     platform_vendor="Intel(R) Corporation", compute_units=2,
                     max_work_group_size=8192, max_work_item_sizes=(8192, 8192, 8192),
                     local_mem_size=32768, local_mem_type="global",
                     native_vector_width_float=8, native_vector_width_double=4,
                     global_mem_cache_size=512 << 10)
UNKNOWN = DeviceInfo("Mystery platform", name="Mystery device")   # nothing reported
ZOO = [NVIDIA_H100, AMD_MI, APPLE_M2, INTEL_ARC, TINY_GPU, AVX2_CPU, AVX512_CPU, NEON_CPU,
       INTEL_CPU_RT, UNKNOWN]
