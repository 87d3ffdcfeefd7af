// The layers below, for `dopesync-bundle` and for the worker above (ARCHITECTURE.md).
@_exported import DopeSyncBundle
@_exported import DopeSyncStore
@_exported import DopeSyncSupport
