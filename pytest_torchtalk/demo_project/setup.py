from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="tinyops",
    packages=["tinyops"],
    ext_modules=[
        CUDAExtension("tinyops._C", ["csrc/ops.cpp", "csrc/scale_kernel.cu"]),
    ],
    cmdclass={"build_ext": BuildExtension},
)
