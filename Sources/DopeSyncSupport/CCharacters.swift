extension String {
    /// The text a C call wrote into `buffer` (`readlink`, `gethostname`): up to its first NUL, or
    /// all of it when it has none (a name that filled the buffer). Bytes that are not UTF-8 become
    /// U+FFFD, which no name compared against them holds.
    package init(cCharacters buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
