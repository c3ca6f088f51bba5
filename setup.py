from setuptools import find_packages, setup


def read_version():
    scope = {}
    with open('mmhybrid/version.py') as f:
        exec(f.read(), scope)
    return scope['__version__']


setup(
    name='mmhybrid',
    version=read_version(),
    description='Hybrid and linear-attention vision backbones for OpenMMLab',
    long_description=open('README.md').read() if __import__('os').path.exists('README.md') else '',
    long_description_content_type='text/markdown',
    packages=find_packages(include=['mmhybrid', 'mmhybrid.*']),
    python_requires='>=3.9',
    # torch and mmcv (with ops) are installed by tools/setup_env.sh: mmcv has no
    # wheels on PyPI and must be compiled against the local torch.
    install_requires=['mmengine>=0.10.0', 'numpy'],
    extras_require={
        'tests': ['pytest', 'pytest-timeout'],
        'sd': ['diffusers==0.42.1', 'transformers==5.23.0'],
        'gpu': ['triton', 'flash-attn', 'flash-linear-attention'],
    },
)
