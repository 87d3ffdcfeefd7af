import DopeSync
import Logging

/// swift-log's text lines on standard error, with every control character in the message and in
/// metadata values written as `\xNN`: a bundle's name or a server's message can hold a newline
/// and escape sequences, and must not forge a log line of its own or rewrite a terminal.
/// (JSON lines need no such care: the encoder escapes them.)
struct EscapedTextLogHandler: LogHandler {
    private var text: StreamLogHandler
    var metadata: Logger.Metadata = [:]

    init(label: String) {
        text = StreamLogHandler.standardError(label: label)
    }

    var logLevel: Logger.Level {
        get { text.logLevel }
        set { text.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.message = "\(DisplayText.escaped(event.message.description))"
        event.metadata = metadata.merging(event.metadata ?? [:]) { $1 }.mapValues(Self.escaped)
        text.log(event: event)
    }

    static func escaped(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let string): .string(DisplayText.escaped(string))
        case .stringConvertible(let convertible): .string(DisplayText.escaped(convertible.description))
        case .array(let values): .array(values.map(escaped))
        case .dictionary(let values): .dictionary(values.mapValues(escaped))
        }
    }
}
