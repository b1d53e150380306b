# Unicode for Hugging Face tokenizers: PCRE2 (libpcre2-dev) for their regexes with \p{..} classes, ICU
# (libicu-dev) for normalization forms. Targets illm::pcre2 and illm::icu.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ILLM_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ILLM_ICU REQUIRED IMPORTED_TARGET icu-uc)
add_library(illm::pcre2 ALIAS PkgConfig::ILLM_PCRE2)
add_library(illm::icu ALIAS PkgConfig::ILLM_ICU)
