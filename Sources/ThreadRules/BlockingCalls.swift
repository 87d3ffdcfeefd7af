import NIOPosix

/// The one rule of where a call that may block its thread (SQLite, libarchive) may run: anywhere
/// but on one of NIO's event loops.
///
/// Why: a loop serves every connection it owns, and in `dopesync run` the loops are also Swift's
/// global executor (ARCHITECTURE.md, "Threads"), so a loop that waits for the disk or a lock
/// leaves every answer on it unread. A call that may block asks ``allowedHere`` and goes to a
/// thread of its own when the answer is no; the C wrappers call ``check(_:)`` before each call into
/// the library, and a debug build stops at the first that breaks the rule. The tests run debug
/// builds of `dopesync run`, so a call put back on a loop fails them (`BlockingCallsTests`).
public enum BlockingCalls {
    /// False on an event loop's thread, true anywhere else (the cooperative pool, a thread pool,
    /// the main thread). One thread-local read.
    @inlinable
    public static var allowedHere: Bool { MultiThreadedEventLoopGroup.currentEventLoop == nil }

    /// In a debug build, stops the process when called on an event loop's thread, naming `call`
    /// and where it was made; nothing in a release build.
    @inlinable
    public static func check(_ call: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
        #if DEBUG
            if !allowedHere {
                preconditionFailure("\(call()) on an event loop thread, which must never block", file: file, line: line)
            }
        #endif
    }
}
