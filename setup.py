from setuptools import find_packages, setup


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def read_version():
    scope = {}
    exec(read('mmhybrid/version.py'), scope)
    return scope['__version__']


setup(
    name='mmhybrid',
    version=read_version(),
    description='Hybrid and linear-attention vision backbones for OpenMMLab',
    long_description=read('README.md'),
    long_description_content_type='text/markdown',
    # mmhybrid: the product; tools: the scripts and the library they share, importable
    # once installed (docs/design.md, Code layout)
    packages=find_packages(include=['mmhybrid', 'mmhybrid.*', 'tools', 'tools.*']),
    python_requires='>=3.9',
    # torch and mmcv (with ops) are installed by tools/setup_env.sh: mmcv has no
    # wheels on PyPI and must be compiled against the local torch.
    install_requires=['mmengine>=0.10.0', 'numpy'],
    extras_require={
        # timm: source models of the weight-loading tests; onnx*: export tests
        # pytest-xdist: `make test` runs two workers
        'tests': ['pytest', 'pytest-timeout', 'pytest-xdist==3.8.0', 'timm==1.0.31',
                  'onnx==1.23.2', 'onnxruntime==1.31.1', 'onnxscript==0.7.2'],
        'deploy': ['onnx==1.23.2', 'onnxruntime==1.31.1', 'onnxscript==0.7.2'],
        # the ELFATT-SD patch needs diffusers alone; a text-to-image pipeline also needs
        # transformers, whose 5.x (what diffusers 0.42 accepts) breaks mmpretrain 1.2.0:
        # install it in an environment without mmpretrain (docs/stable_diffusion.md)
        'sd': ['diffusers==0.42.1'],
        # flash-attn: the 2.8 API and head-size limits that ops/attention encodes;
        # builds from source against the local torch (CUDA >= 12.0, torch >= 2.2,
        # sm80+): pip install --no-build-isolation. See README, GPU machines.
        # flash-linear-attention 0.6.0: torch >= 2.7, triton >= 3.3 (Gated DeltaNet).
        'gpu': ['triton', 'flash-attn>=2.8.3,<2.9', 'flash-linear-attention==0.6.0'],
    },
)
