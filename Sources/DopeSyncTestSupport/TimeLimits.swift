import Foundation
import Testing

extension Trait where Self == TimeLimitTrait {
    /// A time limit of `minutes`, three times that under a sanitizer (`make sanitize` sets
    /// `DOPESYNC_SANITIZER`): every process there runs several times slower, the whole suite in
    /// parallel with it, and two tests well inside their minute on an ordinary build ran past it.
    public static func timeLimit(minutes: Int) -> Self {
        let sanitized = ProcessInfo.processInfo.environment["DOPESYNC_SANITIZER"] != nil
        return .timeLimit(.minutes(sanitized ? minutes * 3 : minutes))
    }
}
