// swift-tools-version: 6.2
// SPDX-License-Identifier: Apache-2.0 (see LICENSE)
import PackageDescription

// Module boundaries the compiler enforces, as Hummingbird 2's: the bundle reader
// (DopeSyncBundle) knows no HTTP, no database and no spool; the store (DopeSyncStore) no HTTP
// and no PostgreSQL, which is DopeSyncPostgres's.
let strictness: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "dopesync",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "dopesync", targets: ["dopesync"]),
        .executable(name: "dopesync-bundle", targets: ["dopesync-bundle"]),
        .executable(name: "dopesync-devserver", targets: ["dopesync-devserver"]),
        .executable(name: "dopesync-bench", targets: ["dopesync-bench"]),
        .library(name: "DopeSync", targets: ["DopeSync"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        // Already in the graph through AsyncHTTPClient and Hummingbird; named for `--ca-file`.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // Already in the graph through Hummingbird; `dopesync run` takes its signals through it.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0", traits: ["YAML"]),
        // Already built for swift-configuration's YAML trait; used directly only to list a job
        // file's keys (with line numbers), so an unknown key is an error, not silently ignored.
        .package(url: "https://github.com/jpsim/Yams", "5.4.0"..<"7.0.0"),
        // The shared checkpoint store of several hosts (`database:`): its pooled `PostgresClient`.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Every child process, the worker's and the tests': async, no descriptor but 0 to 2 inherited.
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.2"),
        // Already in the graph through swift-subprocess; named for `FilePath`, which its API takes.
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
    ],
    targets: [
        // C libraries, each behind a system-library target; no C type leaves the module that wraps it.
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),

        // LeakSanitizer's suppressions, built into every binary (only an ASan build reads them).
        .target(name: "CLeakSuppressions"),

        // glibc's pipe2(O_CLOEXEC), renameat2(RENAME_NOREPLACE) and adjtimex, which Swift's Glibc
        // module does not declare: the pipes of child processes, the spool's no-replace moves, and
        // whether the clock is synchronized.
        .target(name: "CSystemCalls"),

        // Where a call that may block its thread may run: never on an event loop (debug builds stop).
        .target(
            name: "ThreadRules",
            dependencies: [.product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strictness
        ),

        // A small SQLite wrapper shared by the checkpoint store and the dev server's storage.
        .target(
            name: "SQLiteSupport",
            dependencies: ["CSQLite", "CLeakSuppressions", "ThreadRules"],
            swiftSettings: strictness
        ),

        // What every layer uses: files, text for people, the run's stop, its executor and pools.
        .target(
            name: "DopeSyncSupport",
            dependencies: [
                "ThreadRules",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictness
        ),

        // The bundle reader, validator and packer: archives and sessions, no HTTP, no database.
        .target(
            name: "DopeSyncBundle",
            dependencies: [
                "CArchive",
                "DopeSyncSupport",
                "ThreadRules",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),

        // The spool's folders and the checkpoint store of one host (SQLite), with the interfaces
        // every store implements: no HTTP, no PostgreSQL.
        .target(
            name: "DopeSyncStore",
            dependencies: [
                "CSystemCalls",
                "DopeSyncBundle",
                "DopeSyncSupport",
                "SQLiteSupport",
                "ThreadRules",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictness
        ),

        // The checkpoint store several hosts share (PostgreSQL): the store's interfaces, no HTTP.
        .target(
            name: "DopeSyncPostgres",
            dependencies: [
                "DopeSyncBundle",
                "DopeSyncStore",
                "DopeSyncSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: strictness
        ),

        // What a producer's machine needs of the worker, below its HTTP and PostgreSQL: `inspect`
        // (progress from the spool's file or any ledger it is given) and `pack`; the command
        // definitions `dopesync` and `dopesync-bundle` share.
        .target(
            name: "DopeSyncBundleCommands",
            dependencies: [
                "DopeSyncBundle",
                "DopeSyncStore",
                "DopeSyncSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness
        ),

        // The worker: the upload, the run, the configuration and the commands.
        .target(
            name: "DopeSync",
            dependencies: [
                "CSystemCalls",
                "DopeSyncBundle",
                "DopeSyncBundleCommands",
                "DopeSyncPostgres",
                "DopeSyncStore",
                "DopeSyncSupport",
                "SQLiteSupport",
                "ThreadRules",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strictness
        ),

        // The TrueDope API on loopback: its logic lives here so tests can run it in-process.
        .target(
            name: "DopeSyncDevServer",
            dependencies: [
                "SQLiteSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictness
        ),

        .executableTarget(
            name: "dopesync",
            dependencies: [
                "DopeSync",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictness
        ),
        // `inspect` and `pack` alone, for the producers' machines: no HTTP, no PostgreSQL.
        .executableTarget(
            name: "dopesync-bundle",
            dependencies: [
                "DopeSyncBundleCommands",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness
        ),
        .executableTarget(
            name: "dopesync-devserver",
            dependencies: [
                "DopeSyncDevServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictness
        ),
        // Benchmarks and load generation (`make bench`); never part of `make test`.
        .executableTarget(
            name: "dopesync-bench",
            dependencies: [
                "DopeSync",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                "DopeSyncDevServer",
                "DopeSyncTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictness
        ),

        // Shared test helpers: archive producers, an in-process dev server, running the built CLI.
        .target(
            name: "DopeSyncTestSupport",
            dependencies: [
                "CSystemCalls",
                "DopeSync",
                "DopeSyncDevServer",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strictness
        ),

        .testTarget(
            name: "BundleTests",
            dependencies: ["DopeSync", "DopeSyncTestSupport"],
            // Hostile files nobody here wrote, and crashers the fuzzers found: read by path.
            exclude: ["Fixtures"],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "SessionValidationTests",
            dependencies: ["DopeSync"],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "CheckpointTests",
            dependencies: ["DopeSync", "DopeSyncStore", "SQLiteSupport", "DopeSyncTestSupport"],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "DevServerTests",
            dependencies: [
                "DopeSyncDevServer", "DopeSyncTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "RunTests",
            dependencies: [
                "DopeSync", "DopeSyncDevServer", "DopeSyncStore", "DopeSyncTestSupport", "SQLiteSupport",
            ],
            swiftSettings: strictness
        ),
        // Claims as leases and checkpoints in a real PostgreSQL server, shared by several workers.
        .testTarget(
            name: "SeveralHostsTests",
            dependencies: ["DopeSync", "DopeSyncStore", "DopeSyncDevServer", "DopeSyncTestSupport"],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "CLITests",
            dependencies: ["DopeSync", "DopeSyncStore", "DopeSyncTestSupport"],
            swiftSettings: strictness
        ),
    ]
)

// libFuzzer targets (`make fuzz`, Scripts/fuzz.sh). Only with DOPESYNC_FUZZ=1: their `main`
// calls libFuzzer's driver, which exists only in a `-sanitize=fuzzer` build, so an ordinary
// `swift build` or `swift test` never sees them.
if Context.environment["DOPESYNC_FUZZ"] == "1" {
    package.products += [
        .executable(name: "bundle-reader-fuzz", targets: ["BundleReaderFuzz"]),
        .executable(name: "session-fuzz", targets: ["SessionFuzz"]),
    ]
    package.targets += [
        .target(name: "CFuzzerDriver", path: "Fuzz/CFuzzerDriver"),
        .executableTarget(
            name: "BundleReaderFuzz",
            dependencies: ["DopeSync", "CFuzzerDriver"],
            path: "Fuzz/BundleReaderFuzz",
            swiftSettings: strictness
        ),
        .executableTarget(
            name: "SessionFuzz",
            dependencies: ["DopeSync", "CFuzzerDriver"],
            path: "Fuzz/SessionFuzz",
            swiftSettings: strictness
        ),
    ]
}
