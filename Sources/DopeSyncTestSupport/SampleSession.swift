import Foundation

/// A realistic, valid session as a client would write it, with its images, built from a seed so
/// that tests and benchmarks can make as many distinct bundles as they need.
public struct SampleSession: Sendable {
    public var sessionID: String
    /// The session document; tests change it (`json["notes"] = ...`) to make bad bundles.
    public var json: [String: any Sendable]
    /// Image file name → bytes.
    public var images: [String: [UInt8]]

    public struct Shape: Sendable {
        public var dopeEntries = 3
        public var chronoSessions = 1
        public var readingsPerChrono = 5
        public var groups = 2
        public var imagesPerGroup = 1
        public var measurementImages = true
        public var imageBytes = 4096
        public init() {}

        /// This shape with `groups` groups of `imagesPerGroup` photos of `imageBytes` bytes each.
        public func withImages(groups: Int, perGroup imagesPerGroup: Int, bytes imageBytes: Int) -> Shape {
            var shape = self
            shape.groups = groups
            shape.imagesPerGroup = imagesPerGroup
            shape.imageBytes = imageBytes
            return shape
        }

        /// About 50 requests with a few images: the benchmark's "realistic bundle".
        public static var realistic: Shape {
            var shape = Shape()
            shape.dopeEntries = 15
            shape.chronoSessions = 2
            shape.readingsPerChrono = 10
            shape.groups = 4
            shape.imagesPerGroup = 1
            shape.measurementImages = false
            shape.imageBytes = 64 * 1024
            return shape
        }
    }

    public init(seed: UInt64, shape: Shape = Shape()) {
        var generator = SplitMix64(seed: seed)
        func uuid() -> String {
            let a = generator.next()
            let b = generator.next()
            var bytes = withUnsafeBytes(of: a.bigEndian) { Array($0) } + withUnsafeBytes(of: b.bigEndian) { Array($0) }
            bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4
            bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 4122 variant
            let hex = bytes.map { String(format: "%02x", $0) }.joined()
            let parts = [
                hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4),
                hex.dropFirst(20),
            ]
            return parts.joined(separator: "-")
        }
        func image(_ type: Int, size: Int) -> [UInt8] {
            let header: [UInt8]
            switch type % 4 {
            case 0: header = [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8)
            case 1: header = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
            case 2: header = Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WEBPVP8 ".utf8)
            default: header = [0, 0, 0, 0x18] + Array("ftypheic".utf8) + [0, 0, 0, 0]
            }
            // Incompressible, like real photos: the generator's words, in memory order, after the
            // header. Stored a word at a time: appending through slices took a debug build seconds
            // for a few MiB, on a thread of the cooperative pool that every test of the process shares.
            var bytes = [UInt8](repeating: 0, count: max(size, header.count))
            bytes.withUnsafeMutableBytes { buffer in
                buffer.copyBytes(from: header)
                var offset = header.count
                while offset + 8 <= size {
                    buffer.storeBytes(of: generator.next(), toByteOffset: offset, as: UInt64.self)
                    offset += 8
                }
                if offset < size {
                    var word = generator.next()
                    for index in offset..<size {
                        buffer[index] = UInt8(truncatingIfNeeded: word)
                        word >>= 8
                    }
                }
            }
            return bytes
        }

        let sessionID = uuid()
        var images: [String: [UInt8]] = [:]
        var imageCounter = 0
        func addImage(_ prefix: String) -> String {
            imageCounter += 1
            let extensions = ["jpg", "png", "webp", "heic"]
            let name = "\(prefix)-\(imageCounter).\(extensions[(imageCounter - 1) % 4])"
            images[name] = image(imageCounter - 1, size: shape.imageBytes)
            return name
        }

        let dope: [[String: any Sendable]] = (0..<shape.dopeEntries).map { index in
            var entry: [String: any Sendable] = [
                "id": uuid(), "distance": 100 + 50 * index, "elevationMoa": Double(index) * 0.75,
            ]
            if index % 2 == 0 { entry["ammunitionId"] = 1 + index % 5 }
            if index % 3 == 0 { entry["notes"] = "wind from 3 o'clock, \(index)" }
            return entry
        }
        let chrono: [[String: any Sendable]] = (0..<shape.chronoSessions).map { index in
            let readings: [[String: any Sendable]] = (0..<shape.readingsPerChrono).map { shot in
                ["id": uuid(), "shotNumber": shot + 1, "velocity": 2650 + shot * 3 - index, "isExcluded": shot == 2]
            }
            return [
                "id": uuid(), "ammunitionId": 2, "chronographModel": "Garmin Xero C1", "distanceToChronograph": 10,
                "velocityReadings": readings,
            ]
        }
        let groups: [[String: any Sendable]] = (0..<shape.groups).map { index in
            var group: [String: any Sendable] = [
                "id": uuid(), "groupNumber": index + 1, "distance": 100, "numberOfShots": 5,
                "groupSizeMoa": 0.85,
                "imageFileNames": (0..<shape.imagesPerGroup).map { _ in addImage("group\(index + 1)") },
            ]
            var measurement: [String: any Sendable] = [
                "holePositions": [["x": 0.12, "y": -0.3], ["x": -0.05, "y": 0.21]],
                "bulletDiameter": 0.308, "calibrationMethod": "targetGrid", "measurementConfidence": 0.92,
            ]
            if shape.measurementImages {
                measurement["originalImageFileName"] = addImage("orig\(index + 1)")
                measurement["annotatedImageFileName"] = addImage("annot\(index + 1)")
            }
            group["measurement"] = measurement
            return group
        }
        self.sessionID = sessionID
        self.images = images
        json = [
            "id": sessionID,
            "createdAt": "2026-05-04T09:30:00Z",
            "sessionDate": "2026-05-04T11:30:00.250+02:00",
            "rifleSetupId": 7,
            "locationId": 3,
            "notes": "Calm morning, 4 groups at 100 yd",
            "temperature": 18.5, "humidity": 45, "pressure": 29.92, "windSpeed": 3, "windDirection": 270,
            "altitude": 350,
            "dopeEntries": dope,
            "chronoSessions": chrono,
            "groupEntries": groups,
            "syncAttempts": 2,
        ]
    }

    /// This session with its DOPE entry at `index` naming `ammunitionId` (9999: an id the dev
    /// server does not know unless told).
    public func naming(ammunitionId: Int = 9999, inDopeEntry index: Int = 2) -> SampleSession {
        var sample = self
        var dope = sample.json["dopeEntries"] as! [[String: any Sendable]]
        dope[index]["ammunitionId"] = ammunitionId
        sample.json["dopeEntries"] = dope
        return sample
    }

    /// This session with its chrono session at `index` naming the ammo lot `ammoLotId`.
    public func naming(ammoLotId: Int, inChronoSession index: Int = 0) -> SampleSession {
        var sample = self
        var chrono = sample.json["chronoSessions"] as! [[String: any Sendable]]
        chrono[index]["ammoLotId"] = ammoLotId
        sample.json["chronoSessions"] = chrono
        return sample
    }

    /// The same session with its images renamed: the i-th name (in sorted order) becomes
    /// `names[i % names.count]` with the image's number and extension, in the records too.
    /// For names in other scripts: `["Scheibe-ü", "靶紙"]` gives `Scheibe-ü-1.jpg`, `靶紙-2.png`…
    public func renamingImages(to names: [String]) -> SampleSession {
        var renamed = self
        var mapping: [String: String] = [:]
        for (index, old) in images.keys.sorted().enumerated() {
            let ext = (old as NSString).pathExtension
            mapping[old] = "\(names[index % names.count])-\(index + 1).\(ext)"
        }
        renamed.images = Dictionary(uniqueKeysWithValues: images.map { (mapping[$0.key]!, $0.value) })
        func rename(_ value: any Sendable) -> any Sendable {
            switch value {
            case let text as String: return mapping[text] ?? text
            case let array as [any Sendable]: return array.map(rename)
            case let array as [[String: any Sendable]]: return array.map { $0.mapValues(rename) }
            case let object as [String: any Sendable]: return object.mapValues(rename)
            default: return value
            }
        }
        renamed.json = json.mapValues(rename)
        return renamed
    }

    /// The session document's bytes (keys sorted, so the same seed gives the same bytes).
    public var sessionBytes: [UInt8] {
        // Force-try: the document is built from JSON-compatible values only.
        Array(try! JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]))
    }

    /// The `id`s of the DOPE entries, in the document's order (the server's `clientId`s).
    public var dopeEntryIDs: [String] { ids(of: json["dopeEntries"]) }
    /// The `id`s of every chrono session's velocity readings, session by session.
    public var velocityReadingIDs: [String] {
        ((json["chronoSessions"] as? [[String: any Sendable]]) ?? []).flatMap { ids(of: $0["velocityReadings"]) }
    }
    /// The `id`s of the groups, in the document's order.
    public var groupIDs: [String] { ids(of: json["groupEntries"]) }

    private func ids(of records: (any Sendable)?) -> [String] {
        ((records as? [[String: any Sendable]]) ?? []).compactMap { $0["id"] as? String }
    }

    /// The total number of upload requests this session makes (session, records, images).
    public var expectedRequestCount: Int {
        let dope = (json["dopeEntries"] as? [Any])?.count ?? 0
        let chrono = (json["chronoSessions"] as? [[String: any Sendable]]) ?? []
        let readings = chrono.reduce(0) { $0 + (($1["velocityReadings"] as? [Any])?.count ?? 0) }
        let groups = (json["groupEntries"] as? [[String: any Sendable]]) ?? []
        let measurements = groups.filter { $0["measurement"] != nil }.count
        return 1 + dope + chrono.count + readings + groups.count + measurements + images.count
    }

    /// Writes the bundle's folder layout — `session.json`, `images/…` and, if asked, a
    /// `manifest.json` — into `directory`.
    public func writeLayout(to directory: URL, manifest: Bool = false) throws {
        try directory.appendingPathComponent("session.json").write(sessionBytes)
        for (name, bytes) in images {
            try directory.appendingPathComponent("images").appendingPathComponent(name).write(bytes)
        }
        if manifest {
            var files: [String: [String: any Sendable]] = [
                "session.json": ["size": sessionBytes.count, "sha256": sha256Hex(sessionBytes)]
            ]
            for (name, bytes) in images {
                files["images/\(name)"] = ["size": bytes.count, "sha256": sha256Hex(bytes)]
            }
            let document: [String: any Sendable] = ["format": "truedope-session-bundle", "version": 1, "files": files]
            try directory.appendingPathComponent("manifest.json")
                .write(try JSONSerialization.data(withJSONObject: document, options: [.sortedKeys]))
        }
    }
}

/// A small, fast, seedable generator (SplitMix64), so fixtures are the same on every run.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
