import CFuzzerDriver
import DopeSync

#if canImport(Glibc)
    import Glibc
#endif

/// libFuzzer target for `session.json` (`make fuzz`, Scripts/fuzz.sh): the strict JSON parser
/// on its own, then `SessionValidator` on the same bytes. Besides "no trap, no ASan report, no
/// leak, no timeout", it checks what the two promise each other:
/// - a value the parser accepts is written by `serialized()` and parsed back to the same value;
/// - a parse error points inside the input;
/// - validating the bytes and validating the parsed value agree;
/// - a refusal names at least one issue;
/// - an accepted session plans its upload, and every JSON request body is strict JSON again.
@main
enum SessionFuzz {
    static func main() {
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(
            LLVMFuzzerRunDriver(&argc, &argv) { data, size in
                SessionFuzz.testOneInput(Array(UnsafeBufferPointer(start: data, count: size)))
                return 0
            })
    }

    static func testOneInput(_ bytes: [UInt8]) {
        var parsed: JSONValue?
        do {
            parsed = try JSONValue.parse(bytes)
        } catch {
            precondition(
                (0...bytes.count).contains(error.byteOffset), "error at byte \(error.byteOffset) of \(bytes.count)")
            precondition(error.line >= 1 && error.column >= 1, "error at line \(error.line), column \(error.column)")
            _ = error.description
        }
        if let parsed {
            let written = parsed.serialized()
            let again: JSONValue
            do {
                again = try JSONValue.parse(written)
            } catch {
                fatalError(
                    "the parser refuses what the serializer wrote (\(error)): \(String(decoding: written, as: UTF8.self))"
                )
            }
            precondition(
                again == parsed,
                "serialized and parsed again, the value changed: \(String(decoding: written, as: UTF8.self))")
        }
        _ = try? JSONValue.parse(bytes, maxDepth: 3)

        let result = SessionValidator.validate(bytes)
        switch result {
        case .success(let document):
            precondition(parsed != nil, "a session was accepted from bytes the parser refuses")
            for step in UploadPlan.recordSteps(of: document) {
                guard case .json(let body) = step.payload else { continue }
                do {
                    _ = try JSONValue.parse(body)
                } catch {
                    fatalError(
                        "step \(step.key): the request body is not strict JSON (\(error)): \(String(decoding: body, as: UTF8.self))"
                    )
                }
            }
        case .failure(let error):
            precondition(!error.issues.isEmpty, "a refusal without an issue")
            _ = error.description
        }
        if let parsed, bytes.count <= SessionValidator.defaultMaxBytes {
            precondition(
                SessionValidator.validate(parsed: parsed) == result,
                "validating the bytes and the parsed value disagree")
        }
    }
}
