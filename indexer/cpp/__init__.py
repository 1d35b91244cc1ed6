"""C++ and CUDA structure from tree-sitter-cpp, without a build.

``extractor.CppExtractor`` turns one file into function, kernel, class and dispatch-stub
nodes plus call, launch, include and dispatch refs; ``resolve.resolve`` links the ``cpp``
refs by C++ scope rules and ``includes.resolve`` links ``#include`` lines to files.
"""
