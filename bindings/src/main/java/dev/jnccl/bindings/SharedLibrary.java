package dev.jnccl.bindings;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.nio.file.Path;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * A native library that jnccl calls besides NCCL and CUDA (MPI), found with the same rules and
 * error messages as NCCL's loader: the system property or environment variable naming a file,
 * then the dynamic linker's names; a failure lists every place tried with the loader's error. The
 * library is opened {@code RTLD_NOW | RTLD_GLOBAL} (its plugins may need its symbols) and stays
 * loaded for the life of the process.
 *
 * @param path    the file that was loaded
 * @param origin  how it was found ("system property ...", "environment variable ...", "dynamic linker")
 * @param symbols the library's symbols (dlsym on its handle)
 */
public record SharedLibrary(Path path, String origin, SymbolLookup symbols) {

    /**
     * A loaded library.
     *
     * @param path    the file that was loaded
     * @param origin  how it was found
     * @param symbols the library's symbols (dlsym on its handle)
     */
    public SharedLibrary {
        Objects.requireNonNull(path, "SharedLibrary: path is null");
        Objects.requireNonNull(origin, "SharedLibrary: origin is null");
        Objects.requireNonNull(symbols, "SharedLibrary: symbols is null");
    }

    /**
     * Finds and loads a library.
     *
     * @param displayName human name used in messages, e.g. "MPI (libmpi)"
     * @param property    system property naming the file
     * @param environment environment variable naming the file
     * @param linkerNames names handed to the dynamic linker, in order
     * @param hint        what the user can do when nothing is found (ends the error message)
     * @return the loaded library
     * @throws NativeLibraryException when no candidate could be loaded (the message lists them all)
     */
    public static SharedLibrary load(String displayName, String property, String environment,
                                     List<String> linkerNames, String hint) {
        LibraryResolver.Request request = new LibraryResolver.Request(displayName, property, environment,
                List.copyOf(linkerNames), List.of(), List.of(), hint);
        LibraryResolver.Resolved resolved = LibraryResolver.resolve(request, System::getProperty, System::getenv,
                List.of());
        Dl.Handle handle;
        try {
            handle = Dl.open(resolved.handle().path(), true);
        } catch (Dl.DlException e) {
            throw new NativeLibraryException("Could not load " + displayName + " from " + resolved.path() + " ("
                    + resolved.origin() + ") with RTLD_GLOBAL: " + e.getMessage() + "\n" + hint);
        }
        SymbolLookup symbols = name -> {
            MemorySegment address = Dl.symbol(handle, name);
            return address.equals(MemorySegment.NULL) ? Optional.empty() : Optional.of(address);
        };
        return new SharedLibrary(resolved.path(), resolved.origin(), symbols);
    }
}
