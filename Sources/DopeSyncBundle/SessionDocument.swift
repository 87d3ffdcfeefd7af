/// A validated `session.json`: one range session with every nested record, as
/// docs/bundle-format.md ("session.json") describes it. Only `SessionValidator` produces one from bytes, so a value
/// it returns satisfies every rule of that section.
///
/// What the model keeps, so that request bodies built from it are deterministic:
/// - ids: the canonical lowercase form of the UUID (`A1B2…` in the document becomes `a1b2…`);
/// - dates: the RFC 3339 text exactly as written (the API receives it unchanged);
/// - integer fields: `Int`; other numbers: `JSONNumber`, whose literal is sent as written;
/// - optional fields that were absent or `null`: nil.
public struct SessionDocument: Sendable, Equatable {
    public let session: Session

    public init(session: Session) {
        self.session = session
    }

    /// Every image name the session uses, in upload order: for each group in order, its
    /// `imageFileNames` in order (role `photo`), then its measurement's original image, then its
    /// annotated image. A name appears as often as records use it.
    public var imageReferences: [ImageReference] {
        session.groupEntries.enumerated().flatMap { groupIndex, group in
            var references = group.imageFileNames.map {
                ImageReference(groupIndex: groupIndex, groupId: group.id, role: .photo, fileName: $0)
            }
            if let name = group.measurement?.originalImageFileName {
                references.append(
                    ImageReference(groupIndex: groupIndex, groupId: group.id, role: .original, fileName: name))
            }
            if let name = group.measurement?.annotatedImageFileName {
                references.append(
                    ImageReference(groupIndex: groupIndex, groupId: group.id, role: .annotated, fileName: name))
            }
            return references
        }
    }
}

extension SessionDocument {
    /// The session itself: the document's root object.
    public struct Session: Sendable, Equatable {
        public let id: String
        public let createdAt: String
        public let sessionDate: String
        public let rifleSetupId: Int
        public let locationId: Int?
        public let notes: String?
        public let temperature: JSONNumber?
        public let humidity: JSONNumber?
        public let pressure: JSONNumber?
        public let windSpeed: JSONNumber?
        public let windDirection: JSONNumber?
        public let altitude: JSONNumber?
        public let dopeEntries: [DopeEntry]
        public let chronoSessions: [ChronoSession]
        public let groupEntries: [GroupEntry]

        public init(
            id: String, createdAt: String, sessionDate: String, rifleSetupId: Int,
            locationId: Int? = nil, notes: String? = nil,
            temperature: JSONNumber? = nil, humidity: JSONNumber? = nil, pressure: JSONNumber? = nil,
            windSpeed: JSONNumber? = nil, windDirection: JSONNumber? = nil, altitude: JSONNumber? = nil,
            dopeEntries: [DopeEntry] = [], chronoSessions: [ChronoSession] = [], groupEntries: [GroupEntry] = []
        ) {
            self.id = id
            self.createdAt = createdAt
            self.sessionDate = sessionDate
            self.rifleSetupId = rifleSetupId
            self.locationId = locationId
            self.notes = notes
            self.temperature = temperature
            self.humidity = humidity
            self.pressure = pressure
            self.windSpeed = windSpeed
            self.windDirection = windDirection
            self.altitude = altitude
            self.dopeEntries = dopeEntries
            self.chronoSessions = chronoSessions
            self.groupEntries = groupEntries
        }
    }

    /// One DOPE (data on previous engagements) entry: the come-ups for one distance.
    public struct DopeEntry: Sendable, Equatable {
        public let id: String
        public let distance: Int
        public let elevationMoa: JSONNumber?
        public let elevationMil: JSONNumber?
        public let windageMoa: JSONNumber?
        public let windageMil: JSONNumber?
        public let ammunitionId: Int?
        public let notes: String?

        public init(
            id: String, distance: Int,
            elevationMoa: JSONNumber? = nil, elevationMil: JSONNumber? = nil,
            windageMoa: JSONNumber? = nil, windageMil: JSONNumber? = nil,
            ammunitionId: Int? = nil, notes: String? = nil
        ) {
            self.id = id
            self.distance = distance
            self.elevationMoa = elevationMoa
            self.elevationMil = elevationMil
            self.windageMoa = windageMoa
            self.windageMil = windageMil
            self.ammunitionId = ammunitionId
            self.notes = notes
        }
    }

    /// One chronograph string, with its readings in document order.
    public struct ChronoSession: Sendable, Equatable {
        public let id: String
        public let ammunitionId: Int?
        public let ammoLotId: Int?
        public let chronographModel: String?
        public let distanceToChronograph: Int?
        public let notes: String?
        public let velocityReadings: [VelocityReading]

        public init(
            id: String, ammunitionId: Int? = nil, ammoLotId: Int? = nil, chronographModel: String? = nil,
            distanceToChronograph: Int? = nil, notes: String? = nil, velocityReadings: [VelocityReading] = []
        ) {
            self.id = id
            self.ammunitionId = ammunitionId
            self.ammoLotId = ammoLotId
            self.chronographModel = chronographModel
            self.distanceToChronograph = distanceToChronograph
            self.notes = notes
            self.velocityReadings = velocityReadings
        }
    }

    /// One shot over the chronograph; `velocity` in feet per second.
    public struct VelocityReading: Sendable, Equatable {
        public let id: String
        public let shotNumber: Int
        public let velocity: Int
        public let isExcluded: Bool

        public init(id: String, shotNumber: Int, velocity: Int, isExcluded: Bool) {
            self.id = id
            self.shotNumber = shotNumber
            self.velocity = velocity
            self.isExcluded = isExcluded
        }
    }

    /// One shot group, its photos and its optional measurement.
    public struct GroupEntry: Sendable, Equatable {
        public let id: String
        public let groupNumber: Int
        public let distance: Int
        public let numberOfShots: Int
        public let groupSizeMoa: JSONNumber?
        public let meanRadiusMoa: JSONNumber?
        public let ammunitionId: Int?
        public let notes: String?
        /// Plain file names (checked), each naming `images/<name>` in the bundle.
        public let imageFileNames: [String]
        public let measurement: GroupMeasurement?

        public init(
            id: String, groupNumber: Int, distance: Int, numberOfShots: Int,
            groupSizeMoa: JSONNumber? = nil, meanRadiusMoa: JSONNumber? = nil, ammunitionId: Int? = nil,
            notes: String? = nil, imageFileNames: [String] = [], measurement: GroupMeasurement? = nil
        ) {
            self.id = id
            self.groupNumber = groupNumber
            self.distance = distance
            self.numberOfShots = numberOfShots
            self.groupSizeMoa = groupSizeMoa
            self.meanRadiusMoa = meanRadiusMoa
            self.ammunitionId = ammunitionId
            self.notes = notes
            self.imageFileNames = imageFileNames
            self.measurement = measurement
        }
    }

    /// A group's measurement. It has no id of its own: the API identifies it by the group's id.
    public struct GroupMeasurement: Sendable, Equatable {
        public let holePositions: [HolePosition]
        public let bulletDiameter: JSONNumber
        public let calibrationMethod: String
        public let measurementConfidence: JSONNumber?
        public let horizontalSpread: JSONNumber?
        public let verticalSpread: JSONNumber?
        public let cep50: JSONNumber?
        public let originalImageFileName: String?
        public let annotatedImageFileName: String?

        public init(
            holePositions: [HolePosition], bulletDiameter: JSONNumber, calibrationMethod: String,
            measurementConfidence: JSONNumber? = nil, horizontalSpread: JSONNumber? = nil,
            verticalSpread: JSONNumber? = nil, cep50: JSONNumber? = nil,
            originalImageFileName: String? = nil, annotatedImageFileName: String? = nil
        ) {
            self.holePositions = holePositions
            self.bulletDiameter = bulletDiameter
            self.calibrationMethod = calibrationMethod
            self.measurementConfidence = measurementConfidence
            self.horizontalSpread = horizontalSpread
            self.verticalSpread = verticalSpread
            self.cep50 = cep50
            self.originalImageFileName = originalImageFileName
            self.annotatedImageFileName = annotatedImageFileName
        }
    }

    /// A bullet hole, in inches from the point of aim.
    public struct HolePosition: Sendable, Equatable {
        public let x: JSONNumber
        public let y: JSONNumber

        public init(x: JSONNumber, y: JSONNumber) {
            self.x = x
            self.y = y
        }
    }

    /// One use of an image by a group: what the archive reader checks against `images/<fileName>`
    /// and what the uploader sends, in this order.
    public struct ImageReference: Sendable, Equatable {
        /// The image's part in the upload request (`role` in docs/api.yaml).
        public enum Role: String, Sendable, Equatable {
            case photo
            case original
            case annotated
        }

        /// The group's position in `groupEntries`.
        public let groupIndex: Int
        public let groupId: String
        public let role: Role
        public let fileName: String

        public init(groupIndex: Int, groupId: String, role: Role, fileName: String) {
            self.groupIndex = groupIndex
            self.groupId = groupId
            self.role = role
            self.fileName = fileName
        }
    }
}
