import DopeSyncBundle
import DopeSyncSupport

/// An id one record of a bundle names that the server must already have: a rifle setup, a
/// location, an ammunition or an ammo lot (docs/api.md, "Reference lists").
public struct ReferenceUse: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        case rifleSetup, location, ammunition, ammoLot

        /// The reference list that holds this kind's ids (ammo lots are listed under their ammunition).
        public var list: ReferenceList {
            switch self {
            case .rifleSetup: .rifles
            case .location: .locations
            case .ammunition, .ammoLot: .ammunition
            }
        }

        /// For people: `ammunition 999`.
        public var noun: String {
            switch self {
            case .rifleSetup: "rifle setup"
            case .location: "location"
            case .ammunition: "ammunition"
            case .ammoLot: "ammo lot"
            }
        }
    }

    public let kind: Kind
    public let id: Int64
    /// As the failure sidecar names it (docs/spool.md), by the record's kind and place in its array: `session.rifleSetupId`,
    /// `dope[2].ammunitionId`, `chrono[0].ammoLotId`, `groups[1].ammunitionId`.
    public let field: String
    /// Where `session.json` has it: `dopeEntries[2].ammunitionId`.
    public let bundleField: String

    public init(_ kind: Kind, id: Int64, field: String, bundleField: String) {
        self.kind = kind
        self.id = id
        self.field = field
        self.bundleField = bundleField
    }

    /// The failure of a bundle naming an id the server's list does not hold. `recordsOnServer`:
    /// how many of the bundle's records an earlier attempt or bundle of its session already sent
    /// (a resumed bundle), which a person must not take for unsent.
    package func unknownFailure(recordsOnServer: Int) -> BundleFailure {
        let sent =
            recordsOnServer == 0
            ? "Nothing of this bundle was sent."
            : "Nothing more of this bundle was sent; \(recordsOnServer) of its records are already on the server "
                + "from an earlier attempt, so keep its ids."
        return BundleFailure(
            reason: .unknownReference, field: field,
            message:
                "\(kind.noun) \(id) is not in the server's list (GET \(kind.list.path)); session.json names it at "
                + "\(bundleField). \(sent) Add the \(kind.noun) on the server (or correct the bundle), then requeue it")
    }
}

/// The three lists of docs/api.yaml that say which ids a credential may reference.
public enum ReferenceList: String, Sendable, CaseIterable {
    case rifles, ammunition, locations

    public var path: String { "/api/\(rawValue)" }

    /// The kinds of id this list holds.
    package var kinds: [ReferenceUse.Kind] {
        switch self {
        case .rifles: [.rifleSetup]
        case .locations: [.location]
        case .ammunition: [.ammunition, .ammoLot]
        }
    }

    /// The ids of a list body, `{"items": [{"id": 1, "lots": [7, 8]}, …]}`, by kind. Anything
    /// else, or an id that is not a positive integer, is nil: the list cannot be read. An
    /// ammunition list in which no item names `lots` says nothing of lots (an API from before
    /// them, which may take any `ammoLotId`): lots are then not checked, and the create judges.
    package func ids(fromBody bytes: [UInt8]) -> [ReferenceUse.Kind: Set<Int64>]? {
        guard let items = (try? JSONValue.parse(bytes))?.objectValue?["items"]?.arrayValue else { return nil }
        var ids = Dictionary(uniqueKeysWithValues: kinds.map { ($0, Set<Int64>()) })
        func positive(_ value: JSONValue?) -> Int64? {
            guard let literal = value?.numberValue?.literal, let id = Int64(literal), id > 0 else { return nil }
            return id
        }
        var listsLots = false
        for item in items {
            guard let object = item.objectValue, let id = positive(object["id"]) else { return nil }
            ids[kinds[0], default: []].insert(id)
            guard self == .ammunition, let lots = object["lots"] else { continue }
            guard let lots = lots.arrayValue else { return nil }
            listsLots = true
            for lot in lots {
                guard let lot = positive(lot) else { return nil }
                ids[.ammoLot, default: []].insert(lot)
            }
        }
        if self == .ammunition && !listsLots { ids[.ammoLot] = nil }
        return ids
    }
}

/// The ids the server's lists hold, by kind. A kind whose list the server does not serve is
/// absent: nothing of that kind can be checked before the create's own 422.
public struct ReferenceIDs: Sendable, Equatable {
    public private(set) var ids: [ReferenceUse.Kind: Set<Int64>] = [:]

    public init() {}

    package mutating func add(_ list: [ReferenceUse.Kind: Set<Int64>]) { ids.merge(list) { $1 } }

    /// The first use (in plan order) whose id its list does not hold.
    public func firstUnknown(in uses: [ReferenceUse]) -> ReferenceUse? {
        uses.first(where: isUnknown)
    }

    /// Every use whose id its list does not hold, in plan order.
    public func unknown(in uses: [ReferenceUse]) -> [ReferenceUse] { uses.filter(isUnknown) }

    private func isUnknown(_ use: ReferenceUse) -> Bool { ids[use.kind].map { !$0.contains(use.id) } ?? false }

    /// Whether a list of this kind was read.
    public func holdsList(of kind: ReferenceUse.Kind) -> Bool { ids[kind] != nil }
}
