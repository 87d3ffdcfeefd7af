import HTTPTypes
import Hummingbird
import Synchronization

/// `GET /api/rifles`, `/api/ammunition` and `/api/locations`: docs/api.yaml's reference lists, built
/// from the server's reference tables as they are at the request (so `/admin/references`
/// changes them), each with an `ETag` that `If-None-Match` turns into a 304.
///
/// The server's ammo lots are one table, not lots of a given ammunition; the list hangs them on
/// the ammunition ids round-robin in ascending order (lot k under the k-th ammunition, modulo
/// their number), so every lot the server accepts is listed under some ammunition as long as
/// there is any. A client checks a lot against all of them: the create checks no pairing either.
enum ReferenceListRoutes {
    /// The lists, by path and kind.
    enum List: String, CaseIterable, Sendable {
        case rifles, ammunition, locations

        var path: String { "/api/\(rawValue)" }
    }

    static func routes(state: DevServerState) -> [Route] {
        List.allCases.map { list in
            Route(.get, list.path) { request, _ in
                let lots = state.configuration.lotsInList
                let body = state.references.withLock { references in
                    json(list, references: references, lotsInList: lots)
                }
                let tag = etag(of: body)
                let status = matches(request.headers[.ifNoneMatch], tag) ? 304 : 200
                state.observatory.recordListRead(list.rawValue, status: status)
                guard status == 200 else {
                    return Response(status: .notModified, headers: [.eTag: tag])
                }
                return DevServerState.jsonResponse(status: .ok, body: body, headers: [.eTag: tag])
            }
        }
    }

    /// `{"items": [{"id": 1, "name": "…"}, …]}`, ids ascending; ammunition with its `lots`
    /// unless `lotsInList` is false.
    static func json(_ list: List, references: ReferenceIDs, lotsInList: Bool = true) -> String {
        var text = #"{"items":["#
        var first = true
        func item(_ id: Int, _ name: String, lots: [Int]? = nil) {
            if !first { text += "," }
            first = false
            text += #"{"id":\#(id),"name":"\#(name) \#(id)""#
            if let lots { text += #","lots":[\#(lots.map(String.init).joined(separator: ","))]"# }
            text += "}"
        }
        switch list {
        case .rifles:
            for id in ids(references.rifleSetups) { item(id, "rifle setup") }
        case .locations:
            for id in ids(references.locations) { item(id, "location") }
        case .ammunition:
            let ammunition = ids(references.ammunition)
            var lots = [[Int]](repeating: [], count: ammunition.count)
            if !ammunition.isEmpty {
                for (index, lot) in ids(references.ammoLots).enumerated() { lots[index % ammunition.count].append(lot) }
            }
            for (index, id) in ammunition.enumerated() {
                item(id, "ammunition", lots: lotsInList ? lots[index] : nil)
            }
        }
        return text + "]}"
    }

    /// The set's ids, ascending and once each (ranges may overlap after `POST /admin/references`).
    static func ids(_ set: IDSet) -> [Int] {
        var seen = Set<Int>()
        for range in set.ranges { seen.formUnion(range) }
        return seen.sorted()
    }

    /// A strong validator from the body's bytes (64-bit FNV-1a): the same list, the same tag,
    /// across restarts too.
    static func etag(of body: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in body.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "\"" + String(repeating: "0", count: 16 - hex.count) + hex + "\""
    }

    /// RFC 9110 13.1.2: `*`, or any listed tag equal to ours under the weak comparison.
    static func matches(_ ifNoneMatch: String?, _ tag: String) -> Bool {
        guard let ifNoneMatch else { return false }
        func opaque(_ tag: Substring) -> Substring {
            let trimmed = tag.trimmingSpaces
            return trimmed.hasPrefix("W/") ? trimmed.dropFirst(2) : trimmed
        }
        return ifNoneMatch.split(separator: ",").contains { candidate in
            let value = opaque(candidate)
            return value == "*" || value == opaque(Substring(tag))
        }
    }
}
