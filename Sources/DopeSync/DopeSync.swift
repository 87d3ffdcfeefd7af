// The layers below, for the executables and tests that import the worker (ARCHITECTURE.md).
@_exported import DopeSyncBundle
@_exported import DopeSyncBundleCommands
@_exported import DopeSyncPostgres
@_exported import DopeSyncStore
@_exported import DopeSyncSupport
