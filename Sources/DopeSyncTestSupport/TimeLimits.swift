import Foundation
import Testing

extension Trait where Self == TimeLimitTrait {
    /// A time limit of `minutes`, three times that under a sanitizer (`make sanitize` sets
    /// `DOPESYNC_SANITIZER`): every process there runs several times slower, the whole suite in
    /// parallel with it, and two tests well inside their minute on an ordinary build ran past it.
    public static func timeLimit(minutes: Int) -> Self {
        .timeLimit(.minutes(minutes * sanitizerSlowdown))
    }
}

/// How much longer a promise of the worker's own timing (a stop "within seconds") may take under a
/// sanitizer (`make sanitize` sets `DOPESYNC_SANITIZER`): 3, else 1.
public let sanitizerSlowdown = ProcessInfo.processInfo.environment["DOPESYNC_SANITIZER"] != nil ? 3 : 1
