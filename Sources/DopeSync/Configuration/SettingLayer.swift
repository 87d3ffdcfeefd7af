import Configuration
import Foundation
import Yams

/// Looks settings up in their layers, highest first, and remembers where each was found.
struct SettingResolver {
    let layers: [SettingLayer]
    /// Where each setting found came from, by key.
    private(set) var sources: [String: SettingSource] = [:]

    init(layers: [SettingLayer]) { self.layers = layers }

    /// The setting's text as the first layer that has it gives it.
    mutating func lookup(_ setting: RunSetting) throws(ConfigurationError) -> (text: String, source: SettingSource)? {
        for layer in layers {
            if let found = try layer.value(of: setting) {
                sources[setting.key] = found.source
                return found
            }
        }
        return nil
    }

    /// The setting parsed by `parse`; a value it refuses is an error naming the setting, its
    /// source and what was `expected`.
    mutating func parsed<Value>(_ setting: RunSetting, expected: String, _ parse: (String) -> Value?)
        throws(ConfigurationError) -> Value?
    {
        guard let (text, source) = try lookup(setting) else { return nil }
        guard let value = parse(text.trimmingCharacters(in: .whitespaces)) else {
            // A URL may carry a password: shown masked, like every URL.
            let shown = setting == .api ? MaskedURL.string(text) : DisplayText.escaped(text)
            throw ConfigurationError(
                .badValue, key: setting.key, source: source, message: "\"\(shown)\" is not \(expected)")
        }
        return value
    }
}

/// One source of settings, asked through a swift-configuration snapshot.
struct SettingLayer: Sendable {
    let snapshot: any ConfigSnapshot
    /// The provider's key for a setting.
    let key: @Sendable (RunSetting) -> AbsoluteConfigKey
    /// What to tell the operator a value came from.
    let source: @Sendable (RunSetting) -> SettingSource
    /// Keys written with no value (`max-bundles:`): "not set", like a missing line.
    var unsetKeys: Set<String> = []

    func value(of setting: RunSetting) throws(ConfigurationError) -> (text: String, source: SettingSource)? {
        guard !unsetKeys.contains(setting.key) else { return nil }
        let result: LookupResult
        do {
            result = try snapshot.value(forKey: key(setting), type: .string)
        } catch {
            throw ConfigurationError(
                .wrongType, key: setting.key, source: source(setting),
                message: "expected one value, not a list or a mapping")
        }
        guard case .string(let text)? = result.value?.content else { return nil }
        return (text, source(setting))
    }

    static func commandLine(_ options: [RunSetting: String]) -> SettingLayer {
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        for (setting, text) in options {
            values[AbsoluteConfigKey([setting.key])] = ConfigValue(.string(text), isSecret: false)
        }
        return SettingLayer(
            snapshot: InMemoryProvider(name: "command line", values: values).snapshot(),
            key: { AbsoluteConfigKey([$0.key]) }, source: { _ in .commandLine })
    }

    static func environment(_ variables: [String: String]) -> SettingLayer {
        // An empty variable (`DOPESYNC_API_URL=`) counts as not set, as it does for the shell's defaults.
        let provider = EnvironmentVariablesProvider(
            environmentVariables: variables.filter { !$0.value.isEmpty },
            secretsSpecifier: .specific([RunSetting.tokenEnvironmentVariable]))
        // The provider spells `dopesync.max.time` as DOPESYNC_MAX_TIME.
        return SettingLayer(
            snapshot: provider.snapshot(),
            key: { AbsoluteConfigKey($0.environmentVariable.lowercased().split(separator: "_").map(String.init)) },
            source: { .environment(variable: $0.environmentVariable) })
    }

    /// The job file is read once: Yams lists its keys, and its values are looked up in a
    /// `YAMLSnapshot` made from the same bytes.
    static func jobFile(path: String) throws(ConfigurationError) -> SettingLayer {
        let lines = try JobFileKeys.scan(path: path)
        let snapshot: any ConfigSnapshot
        if lines.keys.isEmpty {
            // An empty (or all-comment) job file is allowed.
            snapshot = InMemoryProvider(name: path, values: [:]).snapshot()
        } else {
            do {
                snapshot = try YAMLSnapshot(
                    data: lines.contents.span.bytes, providerName: path, parsingOptions: .default)
            } catch {
                throw ConfigurationError(
                    .unreadableJobFile, key: nil, source: .jobFile(path: path, line: nil),
                    message: "not valid YAML: \(error)")
            }
        }
        return SettingLayer(
            snapshot: snapshot, key: { AbsoluteConfigKey([$0.key]) },
            source: { .jobFile(path: path, line: lines.keys[$0.key]) },
            unsetKeys: lines.nullKeys)
    }
}

/// The keys of a job file with their line numbers, checked against the known settings.
struct JobFileKeys {
    /// Key → 1-based line.
    var keys: [String: Int] = [:]
    /// Keys written with no value (`max-bundles:`), which mean "not set", like a missing line.
    var nullKeys: Set<String> = []
    /// The file's bytes, for the values.
    var contents: [UInt8] = []

    /// The job file's top-level keys whose values are plain scalars, read however wrong the rest
    /// of it is (unknown keys, bad values); throws only when it is no mapping of YAML at all.
    static func scalars(path: String) throws -> [String: String] {
        let contents = try FileSystem.readFile(path, maxBytes: 1024 * 1024)
        guard let mapping = try Yams.compose(yaml: String(decoding: contents, as: UTF8.self))?.mapping else {
            return [:]
        }
        var values: [String: String] = [:]
        for (key, value) in mapping {
            if let key = key.scalar?.string, let value = value.scalar?.string { values[key] = value }
        }
        return values
    }

    static func scan(path: String) throws(ConfigurationError) -> JobFileKeys {
        let whole = SettingSource.jobFile(path: path, line: nil)
        var scanned = JobFileKeys()
        do {
            scanned.contents = try FileSystem.readFile(path, maxBytes: 1024 * 1024)
        } catch {
            throw ConfigurationError(
                .unreadableJobFile, key: nil, source: whole, message: "cannot read the job file: \(error)")
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: String(decoding: scanned.contents, as: UTF8.self))
        } catch {
            throw ConfigurationError(.unreadableJobFile, key: nil, source: whole, message: "not valid YAML: \(error)")
        }
        guard let root else { return scanned }
        guard let mapping = root.mapping else {
            throw ConfigurationError(
                .wrongType, key: nil, source: .jobFile(path: path, line: root.mark?.line),
                message: "a job file is a list of `key: value` lines")
        }
        let known = Set(RunSetting.all.map(\.key))
        for (keyNode, valueNode) in mapping {
            let line = keyNode.mark?.line
            let source = SettingSource.jobFile(path: path, line: line)
            guard let key = keyNode.string else {
                throw ConfigurationError(.wrongType, key: nil, source: source, message: "a key must be a plain name")
            }
            if key == "token" || key == "api-token" {
                throw ConfigurationError(
                    .unknownKey, key: key, source: source,
                    message:
                        "a job file never holds the token; put it in a file named by `token-file:` (mode 600) or in \(RunSetting.tokenEnvironmentVariable)"
                )
            }
            if key == "database-password" || key == "password" {
                throw ConfigurationError(
                    .unknownKey, key: key, source: source,
                    message:
                        "a job file never holds the database's password; put it in a file named by `\(RunSetting.databasePasswordFile.key):` (mode 600) or in DOPESYNC_DATABASE_PASSWORD"
                )
            }
            guard known.contains(key) else {
                let hint =
                    RunSetting.all.map(\.key).min { editDistance($0, key) < editDistance($1, key) }
                    .flatMap { editDistance($0, key) <= 2 ? " (did you mean \($0)?)" : nil }
                    ?? " (known keys: \(RunSetting.all.map(\.key).joined(separator: ", ")))"
                throw ConfigurationError(.unknownKey, key: key, source: source, message: "unknown key\(hint)")
            }
            switch valueNode {
            case .scalar:
                if valueNode.null != nil { scanned.nullKeys.insert(key) }
            case .mapping, .sequence, .alias:
                throw ConfigurationError(
                    .wrongType, key: key, source: source, message: "expected one value, not a list or a mapping")
            }
            scanned.keys[key] = line
        }
        return scanned
    }

    /// Levenshtein distance, for "did you mean" on short keys.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        var previous = Array(0...b.count)  // distances from the first i characters of a
        for (i, character) in a.enumerated() {
            var current = [i + 1]
            for j in b.indices {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (character == b[j] ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }
}
