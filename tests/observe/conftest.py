"""Fixtures of the observe tests: the small MNIST stand-in, written once per module."""

from tests.launch.conftest import mnist_data

__all__ = ["mnist_data"]
