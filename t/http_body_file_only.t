#!/usr/bin/perl

# client_body_in_file_only: a proxied body read whole always goes to a file
# in client_body_temp_path (small ones too), named by $request_body_file and
# sent upstream from it; "on" leaves the file after the request, "clean"
# removes it, "off" (the default) keeps small bodies in memory.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(11);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    client_body_temp_path %%TESTDIR%%/cbt;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /on {
            client_body_in_file_only on;
            add_header X-File "[$request_body_file]";
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /clean {
            client_body_in_file_only clean;
            proxy_request_buffering off;
            add_header X-File "[$request_body_file]";
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
        location /off {
            add_header X-File "[$request_body_file]";
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
    }
}

EOF

$t->raw_backend(port(8081));
$t->run();
my $d = $t->testdir;

sub post {
	my ($uri, $body) = @_;
	return http("POST $uri HTTP/1.0\nHost: localhost\nContent-Length: "
		. length($body) . "\n\n$body");
}

my $r = post('/on', 'small body');
like($r, qr!\r\n\r\nok /on$!, 'on: proxied');
my ($file) = $r =~ /^X-File: \[(.*)\]\r$/m;
like($file // '', qr!^\Q$d\E/cbt/\d{10}$!, 'on: $request_body_file in client_body_temp_path');
ok(defined $file && -f $file, 'on: the file stays after the request');
is(defined $file ? $t->read_file("cbt/" . ($file =~ m!([^/]+)$!)[0]) : '', 'small body',
	'on: the whole body in it');
ok($t->waitforlog(qr/\[notice\].*a client request body is buffered to a temporary file \Q$file\E/),
	'logged at notice, as nginx');

$r = post('/clean', 'x' x 100000);
like($r, qr!\r\n\r\nok /clean$!, 'clean: proxied (request buffering off is overridden)');
($file) = $r =~ /^X-File: \[(.*)\]\r$/m;
like($file // '', qr!^\Q$d\E/cbt/\d{10}$!, 'clean: $request_body_file set');
ok(poll_until(sub { defined $file && !-e $file }), 'clean: the file is removed after the request');
my @reqs = $t->raw_requests(port(8081));
my ($got) = ($reqs[-1] // '') =~ /\r\n\r\n(.*)$/s;
is($got, 'x' x 100000, 'clean: the upstream got the body from the file');

$r = post('/off', 'small body');
like($r, qr!^X-File: \[\]\r$!m, 'off: no $request_body_file');
like(($t->raw_requests(port(8081)))[-1] // '', qr/\r\n\r\nsmall body$/, 'off: the body sent');

$t->stop();
