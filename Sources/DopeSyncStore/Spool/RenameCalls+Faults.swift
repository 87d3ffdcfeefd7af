import DopeSyncBundle
import DopeSyncSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a network file system can make of the calls a move is made of, for tests to inject: this
/// machine has no NFS client, and no local file system reports an error for a call it carried out.
extension SpoolFiles.RenameCalls {
    /// How one call goes wrong.
    enum Fault: Sendable {
        /// The call is carried out, then reports this errno: an NFS client that sent the request
        /// again, the first answer lost, reports the answer to the second (EEXIST for a link,
        /// ENOENT for a rename or an unlink, EIO or ESTALE from a server that restarted).
        /// Should the call itself fail, its own errno is reported.
        case happensButReports(Int32)
        /// The call reports this errno and changes nothing.
        case failsWithoutHappening(Int32)
    }

    /// Which call a fault is for. The rename and the link are matched by their target, the unlink by its path.
    enum Call: Sendable {
        case renameNoReplace, link, unlink
    }

    /// As on NFS and some overlay mounts: `renameat2(RENAME_NOREPLACE)` is refused with EINVAL, so every
    /// move is a `link` and an `unlink`.
    var withoutNoReplaceRename: Self {
        var calls = self
        calls.renameNoReplace = { _, _ in EINVAL }
        return calls
    }

    /// These calls, except that `call` meets `fault` whenever its path is `path`.
    func with(_ fault: Fault, on call: Call, at path: String) -> Self {
        var calls = self
        switch call {
        case .renameNoReplace:
            calls.renameNoReplace = { [renameNoReplace] source, target in
                target == path ? fault.outcome { renameNoReplace(source, target) } : renameNoReplace(source, target)
            }
        case .link:
            calls.link = { [link] source, target in
                target == path ? fault.outcome { link(source, target) } : link(source, target)
            }
        case .unlink:
            calls.unlink = { [unlink] name in
                name == path ? fault.outcome { unlink(name) } : unlink(name)
            }
        }
        return calls
    }
}

extension SpoolFiles.RenameCalls.Fault {
    /// What a call meeting this fault returns, given the call itself.
    fileprivate func outcome(of call: () -> Int32) -> Int32 {
        switch self {
        case .happensButReports(let reported):
            let error = call()
            return error == 0 ? reported : error
        case .failsWithoutHappening(let reported):
            return reported
        }
    }
}
