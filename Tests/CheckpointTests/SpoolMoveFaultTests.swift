import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync
@testable import DopeSyncStore

#if canImport(Glibc)
    import Glibc
#endif

/// Moves over a network file system (docs/operations.md, "Several hosts"): a rename or link over NFS can
/// report an error for what it did, when the client sent the request again and the answer to the
/// first was lost. "A file move that reports an error but happened counts as done; a bundle is never
/// lost or found in two folders." Real files; the faults are injected into the calls the moves are
/// made of (``SpoolFiles/RenameCalls/with(_:on:at:)``), since this machine has no NFS client.
extension SpoolTests {
    /// A call of a move that reported an error although it happened.
    enum HappenedButReported: CaseIterable, Sendable, CustomTestStringConvertible {
        case renameReportsStale, renameReportsNoEntry
        /// Where the no-replace rename is refused (NFS): the link is made of `link` and `unlink`.
        case linkReportsExists, linkReportsIOError, unlinkReportsNoEntry

        /// The system's calls, with this fault on the move of `source` to `target`.
        func calls(from source: String, to target: String) -> SpoolFiles.RenameCalls {
            let nfs = SpoolFiles.RenameCalls.system.withoutNoReplaceRename
            switch self {
            case .renameReportsStale:
                return .system.with(.happensButReports(ESTALE), on: .renameNoReplace, at: target)
            case .renameReportsNoEntry:
                return .system.with(.happensButReports(ENOENT), on: .renameNoReplace, at: target)
            case .linkReportsExists: return nfs.with(.happensButReports(EEXIST), on: .link, at: target)
            case .linkReportsIOError: return nfs.with(.happensButReports(EIO), on: .link, at: target)
            case .unlinkReportsNoEntry: return nfs.with(.happensButReports(ENOENT), on: .unlink, at: source)
            }
        }

        var testDescription: String {
            switch self {
            case .renameReportsStale: "rename happened, reported ESTALE"
            case .renameReportsNoEntry: "rename happened, reported ENOENT"
            case .linkReportsExists: "NFS: link happened, reported EEXIST"
            case .linkReportsIOError: "NFS: link happened, reported EIO"
            case .unlinkReportsNoEntry: "NFS: unlink of the old name happened, reported ENOENT"
            }
        }
    }

    /// A call of a move that failed and did nothing.
    enum FailedWithoutHappening: CaseIterable, Sendable, CustomTestStringConvertible {
        case renameFails, linkFails, unlinkFails

        /// The system's calls, with this fault on the move of `source` to `target`.
        func calls(from source: String, to target: String) -> SpoolFiles.RenameCalls {
            let nfs = SpoolFiles.RenameCalls.system.withoutNoReplaceRename
            switch self {
            case .renameFails: return .system.with(.failsWithoutHappening(EIO), on: .renameNoReplace, at: target)
            case .linkFails: return nfs.with(.failsWithoutHappening(EIO), on: .link, at: target)
            // The link is made, the old name cannot be removed: the new one is removed again.
            case .unlinkFails: return nfs.with(.failsWithoutHappening(EBUSY), on: .unlink, at: source)
            }
        }

        var testDescription: String {
            switch self {
            case .renameFails: "rename failed with EIO"
            case .linkFails: "NFS: link failed with EIO"
            case .unlinkFails: "NFS: link made, unlink of the old name failed with EBUSY"
            }
        }
    }

    /// Where a claimed bundle goes.
    enum Move: CaseIterable, Sendable {
        case toDone, toFailed, back

        var folder: Spool.Folder {
            switch self {
            case .toDone: .done
            case .toFailed: .failed
            case .back: .incoming
            }
        }

        func perform(_ claim: ClaimedBundle) throws(SpoolError) -> String {
            switch self {
            case .toDone: return try claim.moveToDone()
            case .toFailed:
                return try claim.moveToFailed(
                    ErrorSidecar(bundle: claim.name, failedAt: Date(), reason: .http(422), step: "dope:1"))
            case .back: return try claim.giveBack()
            }
        }
    }

    /// Every file in the spool's folders but `tmp/`, as `folder/name`, dot-files included (a
    /// sidecar's temporary): the bundle must be under one of them, with a sidecar iff in `failed/`.
    func everyFile() throws -> [String] {
        try [Spool.Folder.incoming, .processing, .done, .failed].flatMap { folder in
            try fileNames(in: spool.path(folder)).map { "\(folder.rawValue)/\($0)" }
        }
    }

    // MARK: Moves of a claimed bundle

    @Test(
        "a move that reported an error but happened is done: the name returned, the bundle in one folder",
        arguments: Move.allCases, HappenedButReported.allCases)
    func aMoveThatHappenedIsDone(move: Move, fault: HappenedButReported) throws {
        try arrive("b.tar.gz", "payload")
        let target = spool.path(move.folder, "b.tar.gz")
        let claim = try claimFirstDue(
            renameCalls: fault.calls(from: spool.path(.processing, "b.tar.gz"), to: target))

        #expect(try move.perform(claim) == "b.tar.gz")
        #expect(!claim.isHeld)
        #expect(contents(target) == "payload")
        let sidecar = move == .toFailed ? ["failed/b.tar.gz.error"] : []
        #expect(try everyFile() == ["\(move.folder.rawValue)/b.tar.gz"] + sidecar)
        if move == .toFailed {
            #expect(ErrorSidecar.read(from: spool.sidecarPath(forFailed: "b.tar.gz"))?.bundle == "b.tar.gz")
        }
    }

    @Test(
        "a move that failed leaves the bundle in processing/, still claimed, and no sidecar",
        arguments: Move.allCases, FailedWithoutHappening.allCases)
    func aMoveThatFailedLeavesTheBundleInProcessing(move: Move, fault: FailedWithoutHappening) throws {
        try arrive("b.tar.gz", "payload")
        let source = spool.path(.processing, "b.tar.gz")
        let claim = try claimFirstDue(
            renameCalls: fault.calls(from: source, to: spool.path(move.folder, "b.tar.gz")))

        let error = #expect(throws: SpoolError.self) { try move.perform(claim) }
        #expect(error?.code == .moveFailed)
        #expect(claim.isHeld)
        #expect(contents(source) == "payload")
        #expect(try everyFile() == ["processing/b.tar.gz"])
    }

    @Test("a move that happened under a suffixed name returns that name", arguments: Move.allCases)
    func aSuffixedMoveThatHappenedReturnsItsName(move: Move) throws {
        try arrive("b.tar.gz", "payload")
        let claim = try claimFirstDue(
            renameCalls: HappenedButReported.linkReportsExists.calls(
                from: spool.path(.processing, "b.tar.gz"), to: spool.path(move.folder, "b.1.tar.gz")))
        try writeFile(spool.path(move.folder, "b.tar.gz"), "another bundle")
        if move == .toFailed { try writeFile(spool.sidecarPath(forFailed: "b.tar.gz"), "bundle: b.tar.gz\n") }

        #expect(try move.perform(claim) == "b.1.tar.gz")
        #expect(contents(spool.path(move.folder, "b.tar.gz")) == "another bundle")
        #expect(contents(spool.path(move.folder, "b.1.tar.gz")) == "payload")
        #expect(try fileNames(in: spool.path(.processing)).isEmpty)
    }

    // MARK: The sidecar of a failed bundle

    @Test(
        "a sidecar placed although its rename reported an error is kept; one not placed stops the move",
        arguments: [
            (SpoolFiles.RenameCalls.Fault.happensButReports(EIO), true),
            (.failsWithoutHappening(EIO), false),
        ])
    func sidecarWhoseRenameReportsAnError(fault: SpoolFiles.RenameCalls.Fault, placed: Bool) throws {
        try arrive("b.tar.gz", "payload")
        let claim = try claimFirstDue(
            renameCalls: .system.with(fault, on: .renameNoReplace, at: spool.sidecarPath(forFailed: "b.tar.gz")))

        if placed {
            #expect(try Move.toFailed.perform(claim) == "b.tar.gz")
            #expect(try everyFile() == ["failed/b.tar.gz", "failed/b.tar.gz.error"])
        } else {
            let error = #expect(throws: SpoolError.self) { try Move.toFailed.perform(claim) }
            #expect(error?.code == .sidecarFailed)
            #expect(claim.isHeld)
            #expect(try everyFile() == ["processing/b.tar.gz"])
        }
    }

    @Test("a failed bundle that cannot leave either name keeps its sidecar")
    func aFailedBundleUnderBothNamesKeepsItsSidecar() throws {
        try arrive("b.tar.gz", "payload")
        let source = spool.path(.processing, "b.tar.gz")
        let target = spool.path(.failed, "b.tar.gz")
        // The link is made; neither the old name nor, undoing it, the new one can be removed.
        let calls = SpoolFiles.RenameCalls.system.withoutNoReplaceRename
            .with(.failsWithoutHappening(EBUSY), on: .unlink, at: source)
            .with(.failsWithoutHappening(EBUSY), on: .unlink, at: target)
        let claim = try claimFirstDue(renameCalls: calls)

        let error = #expect(throws: SpoolError.self) { try Move.toFailed.perform(claim) }
        #expect(error?.code == .moveFailed)
        #expect(try everyFile() == ["processing/b.tar.gz", "failed/b.tar.gz", "failed/b.tar.gz.error"])
    }

    /// `b.tar.gz` (its contents "payload") claimed, then left in `processing/` by a worker that
    /// died between the link and the unlink of a move: also under each of `names` (`folder/NAME`,
    /// a failed one with its sidecar, placed first), then taken back as an orphan.
    func cutShortOrphan(
        alsoAt names: [(Spool.Folder, String)], calls: SpoolFiles.RenameCalls, leased: Bool = false
    ) throws -> ClaimedBundle {
        try arrive("b.tar.gz", "payload")
        let source = spool.path(.processing, "b.tar.gz")
        let first = try claimFirstDue(renameCalls: calls)
        for (folder, name) in names {
            if folder == .failed {
                try writeFile(spool.sidecarPath(forFailed: name), "bundle: \(name)\nreason: http_500\n")
            }
            #expect(link(source, spool.path(folder, name)) == 0)
        }
        first.release()
        let orphan = try #require(try spool.processingEntries().first)
        return try #require(try spool.claimOrphan(orphan, leased: leased, renameCalls: calls))
    }

    @Test(
        "a bundle left under two names by a cut-short move to failed/ fails again under one: no second name, the newer sidecar",
        arguments: [SpoolFiles.RenameCalls.system, .system.withoutNoReplaceRename])
    func aFailureFinishesACutShortMoveToFailed(calls: SpoolFiles.RenameCalls) throws {
        // What an NFS move to failed/ leaves when the worker dies between its link and its unlink.
        let again = try cutShortOrphan(alsoAt: [(.failed, "b.tar.gz")], calls: calls)
        #expect(try Move.toFailed.perform(again) == "b.tar.gz")
        #expect(try everyFile() == ["failed/b.tar.gz", "failed/b.tar.gz.error"])
        #expect(contents(spool.path(.failed, "b.tar.gz")) == "payload")
        let sidecar = contents(spool.sidecarPath(forFailed: "b.tar.gz")) ?? ""
        #expect(sidecar.contains("step: dope:1") && !sidecar.contains("http_500"), "\(sidecar)")
    }

    @Test(
        "a bundle left in another folder too by a cut-short move ends in one folder, whatever its next move",
        arguments: Move.allCases, [Spool.Folder.incoming, .done, .failed])
    func aCutShortMoveElsewhereLeavesOneFolder(move: Move, cutShortIn folder: Spool.Folder) throws {
        // The earlier move took a suffixed name (its own was taken then). A producer's own hard
        // link under another name is not the bundle's: it stays.
        let again = try cutShortOrphan(
            alsoAt: [(folder, "b.1.tar.gz"), (.tmp, "producers-copy")], calls: .system.withoutNoReplaceRename)
        let final = try move.perform(again)
        #expect(final == "b.tar.gz")
        let expected =
            move == .toFailed
            ? ["failed/b.tar.gz", "failed/b.tar.gz.error"] : ["\(move.folder.rawValue)/b.tar.gz"]
        #expect(try everyFile() == expected)
        #expect(FileManager.default.fileExists(atPath: spool.path(.tmp, "producers-copy")))
    }

    @Test(
        "a leased claim leaves a cut-short move's name alone: a paused worker whose lease ran out may still unlink the processing/ name"
    )
    func aLeasedClaimLeavesOtherNames() throws {
        // The paused worker's link into done/, its unlink not yet made.
        let takenOver = try cutShortOrphan(
            alsoAt: [(.done, "b.1.tar.gz")], calls: .system.withoutNoReplaceRename, leased: true)
        #expect(try Move.toFailed.perform(takenOver) == "b.tar.gz")
        #expect(try everyFile() == ["done/b.1.tar.gz", "failed/b.tar.gz", "failed/b.tar.gz.error"])
    }

    @Test("the suffixed forms of a name are told from other names")
    func suffixedForms() {
        #expect(Spool.isSuffixed("a.tar.gz", formOf: "a.tar.gz"))
        #expect(Spool.isSuffixed("a.1.tar.gz", formOf: "a.tar.gz"))
        #expect(Spool.isSuffixed("a.12.tar.gz", formOf: "a.tar.gz"))
        #expect(Spool.isSuffixed("s.3", formOf: "s"))
        #expect(Spool.isSuffixed("v1.2.zip", formOf: "v1.zip"))
        #expect(!Spool.isSuffixed("a.01.tar.gz", formOf: "a.tar.gz"))
        #expect(!Spool.isSuffixed("a.0.tar.gz", formOf: "a.tar.gz"))
        #expect(!Spool.isSuffixed("b.1.tar.gz", formOf: "a.tar.gz"))
        #expect(!Spool.isSuffixed("a.tar.gz.1", formOf: "a.tar.gz"))
    }

    // MARK: Claims

    @Test(
        "a claim whose rename reported an error but happened is a claim: the bundle in processing/, locked",
        arguments: HappenedButReported.allCases)
    func aClaimThatHappenedIsAClaim(fault: HappenedButReported) throws {
        try arrive("b.tar.gz", "payload")
        let calls = fault.calls(from: spool.path(.incoming, "b.tar.gz"), to: spool.path(.processing, "b.tar.gz"))
        let claim = try claimFirstDue(renameCalls: calls)

        #expect(claim.isHeld)
        #expect(try everyFile() == ["processing/b.tar.gz"])
        // Ours alone: no run takes it as an orphan while it is held.
        #expect(try spool.claimOrphan(try #require(try spool.processingEntries().first)) == nil)
        #expect(try claim.moveToDone() == "b.tar.gz")
        #expect(try everyFile() == ["done/b.tar.gz"])
    }

    @Test(
        "a claim whose rename failed leaves the bundle in incoming/ for the next claim",
        arguments: FailedWithoutHappening.allCases)
    func aClaimThatFailedLeavesTheBundleInIncoming(fault: FailedWithoutHappening) throws {
        try arrive("b.tar.gz", "payload")
        let entry = try #require(try spool.scan(now: now).first)
        let calls = fault.calls(from: spool.path(.incoming, "b.tar.gz"), to: spool.path(.processing, "b.tar.gz"))

        let error = #expect(throws: SpoolError.self) { try spool.claim(entry, renameCalls: calls) }
        #expect(error?.code == .claimFailed)
        #expect(try everyFile() == ["incoming/b.tar.gz"])
        #expect(try spool.claim(entry)?.name == "b.tar.gz")
    }

    // MARK: One file under two names

    @Test(
        "a target that already names the moved file (a link + unlink cut short) completes the move",
        arguments: [SpoolFiles.RenameCalls.system, .system.withoutNoReplaceRename])
    func aMoveOntoALinkOfItselfCompletes(calls: SpoolFiles.RenameCalls) throws {
        let source = spool.path(.processing, "b.tar.gz")
        try writeFile(source, "payload")
        #expect(link(source, spool.path(.done, "b.tar.gz")) == 0)

        #expect(
            try SpoolFiles.moveNoReplace(source, toFolder: spool.path(.done), name: "b.tar.gz", calls: calls)
                == "b.tar.gz")
        #expect(try everyFile() == ["done/b.tar.gz"])
    }

    @Test(
        "a name an earlier move made stays when the source's cannot be removed: a paused worker may still unlink the source's",
        arguments: [SpoolFiles.RenameCalls.system, .system.withoutNoReplaceRename])
    func aLinkThisMoveDidNotMakeStays(calls: SpoolFiles.RenameCalls) throws {
        let source = spool.path(.processing, "b.tar.gz")
        try writeFile(source, "payload")
        #expect(link(source, spool.path(.done, "b.tar.gz")) == 0)  // the paused worker's
        let failing = calls.with(.failsWithoutHappening(EIO), on: .unlink, at: source)

        let error = #expect(throws: SpoolError.self) {
            try SpoolFiles.moveNoReplace(source, toFolder: spool.path(.done), name: "b.tar.gz", calls: failing)
        }
        #expect(error?.errno == EIO)
        #expect(try everyFile() == ["processing/b.tar.gz", "done/b.tar.gz"])
    }

    @Test("on NFS, a name another file holds still gets a suffix: the link's EEXIST is judged by the inode")
    func anotherFilesNameGetsASuffixOnNFS() throws {
        let source = spool.path(.processing, "b.tar.gz")
        try writeFile(source, "payload")
        try writeFile(spool.path(.done, "b.tar.gz"), "another bundle")
        let calls = SpoolFiles.RenameCalls.system.withoutNoReplaceRename

        #expect(
            try SpoolFiles.moveNoReplace(source, toFolder: spool.path(.done), name: "b.tar.gz", calls: calls)
                == "b.1.tar.gz")
        #expect(try everyFile() == ["done/b.1.tar.gz", "done/b.tar.gz"])
        #expect(contents(spool.path(.done, "b.tar.gz")) == "another bundle")
        #expect(contents(spool.path(.done, "b.1.tar.gz")) == "payload")
    }
}
