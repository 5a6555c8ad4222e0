/*
 * An Iceberg REST catalog for twopc's tests: the REST protocol served with the request
 * handlers of iceberg-core (org.apache.iceberg.rest.CatalogHandlers, the code behind
 * Iceberg's own REST fixture, which Maven Central does not serve) over the JDK's HTTP
 * server, backed by Iceberg's JDBC catalog on a SQLite file, so tables survive a kill.
 * Metadata files are written to the local filesystem (no Hadoop). Written for
 * scripts/services (unit iceberg-rest); not a production server: no auth, one request at a
 * time.
 *
 *   java -cp <iceberg-core and its dependencies>:<this class> TwopcRestCatalog PORT WAREHOUSE DB
 */

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.PropertyAccessor;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.Files;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.RESTSerializers;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.rest.responses.LoadTableResponse;

public final class TwopcRestCatalog {
  private final JdbcCatalog catalog;
  private final ObjectMapper mapper;

  private TwopcRestCatalog(JdbcCatalog catalog, ObjectMapper mapper) {
    this.catalog = catalog;
    this.mapper = mapper;
  }

  public static void main(String[] args) throws IOException {
    if (args.length != 3) {
      System.err.println("usage: TwopcRestCatalog PORT WAREHOUSE SQLITE_FILE");
      System.exit(2);
    }
    Map<String, String> properties = new HashMap<>();
    properties.put("uri", "jdbc:sqlite:" + args[2]);
    properties.put("warehouse", args[1]);
    properties.put("io-impl", LocalFileIO.class.getName());
    properties.put("jdbc.schema-version", "V1");
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.initialize("twopc_rest", properties);

    ObjectMapper mapper = new ObjectMapper();
    mapper.setVisibility(PropertyAccessor.FIELD, JsonAutoDetect.Visibility.ANY);
    mapper.configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
    mapper.setPropertyNamingStrategy(new PropertyNamingStrategies.KebabCaseStrategy());
    RESTSerializers.registerAll(mapper);

    TwopcRestCatalog server = new TwopcRestCatalog(catalog, mapper);
    HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(args[0])), 64);
    http.createContext("/", server::serve);
    // one request at a time: the catalog's SQLite file has one writer; a commit's
    // compare-and-swap is still checked against the table's current metadata
    http.setExecutor(Executors.newSingleThreadExecutor());
    http.start();
    System.out.println("twopc REST catalog on 127.0.0.1:" + args[0] + ", warehouse " + args[1]);
  }

  private void serve(HttpExchange exchange) throws IOException {
    String method = exchange.getRequestMethod();
    String path = exchange.getRequestURI().getRawPath();
    Map<String, String> query = query(exchange.getRequestURI());
    byte[] body = exchange.getRequestBody().readAllBytes();
    try {
      Object response = route(method, path, query, body);
      if (response == null) {
        exchange.sendResponseHeaders(204, -1);
      } else {
        send(exchange, 200, mapper.writeValueAsBytes(response));
      }
    } catch (RuntimeException e) {
      int code = status(e);
      ErrorResponse error =
          ErrorResponse.builder()
              .responseCode(code)
              .withType(e.getClass().getSimpleName())
              .withMessage(String.valueOf(e.getMessage()))
              .build();
      if (code >= 500) {
        e.printStackTrace();
      }
      if ("HEAD".equals(method)) {
        exchange.sendResponseHeaders(code, -1);
      } else {
        send(exchange, code, mapper.writeValueAsBytes(error));
      }
    } finally {
      exchange.close();
    }
  }

  private Object route(String method, String path, Map<String, String> query, byte[] body)
      throws IOException {
    List<String> parts = List.of(path.replaceAll("^/+|/+$", "").split("/"));
    if (parts.isEmpty() || !"v1".equals(parts.get(0))) {
      throw new NotFound("no route for " + method + " " + path);
    }
    if (parts.size() == 2 && "config".equals(parts.get(1)) && "GET".equals(method)) {
      return ConfigResponse.builder().build();
    }
    if (parts.size() == 3 && "tables".equals(parts.get(1)) && "rename".equals(parts.get(2))) {
      CatalogHandlers.renameTable(catalog, read(body, RenameTableRequest.class));
      return null;
    }
    if (parts.size() < 2 || !"namespaces".equals(parts.get(1))) {
      throw new NotFound("no route for " + method + " " + path);
    }
    if (parts.size() == 2) {
      if ("GET".equals(method)) {
        String parent = query.get("parent");
        Namespace ns = parent == null ? Namespace.empty() : RESTUtil.decodeNamespace(parent);
        return CatalogHandlers.listNamespaces(catalog, ns);
      }
      return CatalogHandlers.createNamespace(catalog, read(body, CreateNamespaceRequest.class));
    }
    Namespace namespace = RESTUtil.decodeNamespace(decode(parts.get(2)));
    if (parts.size() == 3) {
      switch (method) {
        case "HEAD":
          CatalogHandlers.namespaceExists(catalog, namespace);
          return null;
        case "DELETE":
          CatalogHandlers.dropNamespace(catalog, namespace);
          return null;
        default:
          return CatalogHandlers.loadNamespace(catalog, namespace);
      }
    }
    if (parts.size() == 4 && "properties".equals(parts.get(3))) {
      return CatalogHandlers.updateNamespaceProperties(
          catalog, namespace, read(body, UpdateNamespacePropertiesRequest.class));
    }
    if (!"tables".equals(parts.get(3))) {
      throw new NotFound("no route for " + method + " " + path);
    }
    if (parts.size() == 4) {
      if ("GET".equals(method)) {
        return CatalogHandlers.listTables(catalog, namespace);
      }
      CreateTableRequest request = read(body, CreateTableRequest.class);
      return request.stageCreate()
          ? CatalogHandlers.stageTableCreate(catalog, namespace, request)
          : CatalogHandlers.createTable(catalog, namespace, request);
    }
    TableIdentifier ident = TableIdentifier.of(namespace, decode(parts.get(4)));
    if (parts.size() == 6 && "metrics".equals(parts.get(5))) {
      return null; // scan and commit reports: accepted, not kept
    }
    switch (method) {
      case "HEAD":
        CatalogHandlers.tableExists(catalog, ident);
        return null;
      case "DELETE":
        if ("true".equals(query.get("purgeRequested"))) {
          CatalogHandlers.purgeTable(catalog, ident);
        } else {
          CatalogHandlers.dropTable(catalog, ident);
        }
        return null;
      case "POST":
        return CatalogHandlers.updateTable(catalog, ident, read(body, UpdateTableRequest.class));
      default:
        Table table = catalog.loadTable(ident);
        return LoadTableResponse.builder()
            .withTableMetadata(((BaseTable) table).operations().current())
            .build();
    }
  }

  private <T> T read(byte[] body, Class<T> type) throws IOException {
    return mapper.readValue(body, type);
  }

  private static int status(RuntimeException e) {
    if (e instanceof NoSuchTableException || e instanceof NoSuchNamespaceException
        || e instanceof NotFound) {
      return 404;
    }
    if (e instanceof AlreadyExistsException || e instanceof CommitFailedException
        || e instanceof NamespaceNotEmptyException) {
      return 409;
    }
    if (e instanceof CommitStateUnknownException) {
      return 500;
    }
    if (e instanceof IllegalArgumentException || e instanceof ValidationException
        || e instanceof UnsupportedOperationException) {
      return 400;
    }
    return 500;
  }

  private static void send(HttpExchange exchange, int code, byte[] bytes) throws IOException {
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(code, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }

  private static String decode(String part) {
    return URLDecoder.decode(part, StandardCharsets.UTF_8);
  }

  private static Map<String, String> query(URI uri) {
    Map<String, String> values = new HashMap<>();
    String raw = uri.getRawQuery();
    if (raw == null || raw.isEmpty()) {
      return values;
    }
    for (String pair : raw.split("&")) {
      int eq = pair.indexOf('=');
      String key = decode(eq < 0 ? pair : pair.substring(0, eq));
      values.put(key, eq < 0 ? "" : decode(pair.substring(eq + 1)));
    }
    return values;
  }

  /** An unknown route. */
  static final class NotFound extends RuntimeException {
    NotFound(String message) {
      super(message);
    }
  }

  /** Metadata files on the local filesystem, for locations "file:/..." or plain paths. */
  public static final class LocalFileIO implements FileIO {
    @Override
    public InputFile newInputFile(String path) {
      return Files.localInput(local(path));
    }

    @Override
    public OutputFile newOutputFile(String path) {
      File file = local(path);
      file.getParentFile().mkdirs();
      return Files.localOutput(file);
    }

    @Override
    public void deleteFile(String path) {
      File file = local(path);
      if (file.exists() && !file.delete()) {
        throw new IllegalStateException("cannot delete " + path);
      }
    }

    private static File local(String path) {
      return path.startsWith("file:") ? new File(URI.create(path)) : new File(path);
    }
  }
}
