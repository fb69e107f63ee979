"""CuTe DSL device code, one module per kernel family (see each module's docstring).

Importing this package does not import cutlass; import the kernel modules directly."""
